"""`perfetto-trace`: trace any Python program with no code changes."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
import time
import types
from typing import Any, NoReturn

from perfetto_client._errors import TracingError
from perfetto_client._snapshot_signal import release as release_snapshot_signal
from perfetto_client._tracer._engine import TRANSPARENT, on_fork_in_child
from perfetto_client._tracer._options import (
    DEFAULT_MAX_SIZE_MB,
    DEFAULT_OUTPUT,
    DEFAULT_UI_PORT,
    TraceOptions,
)
from perfetto_client._tracer._recording import Recording
from perfetto_client._tracer._runner import Program, without_own_frames

USAGE = """\
perfetto-trace run [options] script.py [args...]
       perfetto-trace run [options] -m module [args...]"""
OPEN_USAGE = "perfetto-trace open [--port N] FILE"
REPORT_USAGE = "perfetto-trace report [--limit N] [--json | --html OUT.html] FILE"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*(ns|us|µs|ms|s)?\s*$")
_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


class _Terminated(BaseException):
    """Raised in the main thread by SIGTERM or --duration: the program stops, the trace ends."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _parse_duration(text: str) -> int:
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 50us, 2ms, 1.5s)")
    return int(float(match.group(1)) * _UNITS[match.group(2) or "us"])


def _parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("--duration must be positive")
    return value


def _parse_megabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in MB: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("--ring must be positive")
    return value


def _parse_max_size(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size in MB: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError("--max-size takes a size in MB (0: no cap)")
    return value


def _parse_port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"--port takes a port number (1-65535), not {text!r}")
    return int(text)


def _parse_limit(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--limit takes a positive integer, not {text!r}")
    return int(text)


def _parse_level(text: str) -> int:
    # logging: 5 ms of CPU before the program, for --log-level only.
    import logging

    level = int(text) if text.isdigit() else logging.getLevelNamesMapping().get(text.upper())
    if level is None:
        raise argparse.ArgumentTypeError(
            f"--logging takes a level (DEBUG, INFO, WARNING, ERROR, CRITICAL or a number), "
            f"not {text!r}"
        )
    return level


def _parse_depth(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--max-depth takes a positive integer, not {text!r}")
    return int(text)


class _Parser(argparse.ArgumentParser):
    _sized = False
    """Set while help or usage is formatted: only then is the terminal's width needed."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse checks each option's metavar with a formatter of its own; one sized to the
        # terminal imports shutil (about 4 ms of CPU, a tenth of perfetto-trace's start-up).
        if self._sized:
            return super()._get_formatter()
        return argparse.HelpFormatter(self.prog, width=80)

    def format_usage(self) -> str:
        self._sized = True
        try:
            return super().format_usage()
        finally:
            self._sized = False

    def format_help(self) -> str:
        self._sized = True
        try:
            return super().format_help()
        finally:
            self._sized = False

    def error(self, message: str) -> NoReturn:
        command = self.prog if self.prog != "perfetto-trace" else "perfetto-trace run"
        self.exit(1, f"perfetto-trace: {message} (see {command} --help)\n")


class _Version(argparse.Action):
    """`--version`: `perfetto-trace (perfetto-py) X.Y.Z` (the metadata is read only then)."""

    def __init__(self, option_strings: list[str], dest: str) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> NoReturn:
        # importlib.metadata: 38 ms of CPU, for --version only.
        from importlib.metadata import version

        print(f"perfetto-trace (perfetto-py) {version('perfetto-client')}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="perfetto-trace",
        description="Records every Python function call of a program into a Perfetto trace "
        "(open it in https://ui.perfetto.dev).",
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(
        dest="command", metavar="{run,open,report}", parser_class=_Parser
    )
    run = commands.add_parser("run", usage=USAGE, help="run a program and trace it")
    run.add_argument("-o", "--output", default=DEFAULT_OUTPUT, help="trace file (%(default)s)")
    run.add_argument("-m", dest="module", help="run a library module as a script")
    run.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="record only functions whose module or file matches (repeatable)",
    )
    run.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="do not record functions whose module or file matches (repeatable)",
    )
    run.add_argument(
        "--max-depth", type=_parse_depth, default=0, metavar="N", help="record calls at most N deep"
    )
    run.add_argument(
        "--min-duration",
        type=_parse_duration,
        default=0,
        metavar="TIME",
        help="drop slices shorter than TIME (e.g. 20us; a bare number is µs)",
    )
    run.add_argument("--no-c-calls", action="store_true", help="do not record builtin calls")
    run.add_argument(
        "--exception-types",
        action="store_true",
        help="name each exception's type where it is raised (compiled hook; costs about "
        "as much again as recording the calls)",
    )
    run.add_argument("--no-gc", action="store_true", help="do not record garbage collections")
    run.add_argument(
        "--ring",
        type=_parse_megabytes,
        default=0.0,
        metavar="MB",
        help="flight recorder: keep only the last MB megabytes; SIGUSR1 writes a snapshot",
    )
    run.add_argument(
        "--max-size",
        type=_parse_max_size,
        default=DEFAULT_MAX_SIZE_MB,
        metavar="MB",
        help="stop writing the trace before it grows past MB megabytes (%(default)g; 0: no "
        "cap); what is left out is counted and the trace is said to be partial",
    )
    run.add_argument(
        "--snapshot-trigger",
        action="append",
        default=[],
        metavar="NAME",
        help="with --ring: the program's Tracing.activate_triggers([NAME]) writes a snapshot "
        "(repeatable)",
    )
    run.add_argument(
        "--duration",
        type=_parse_seconds,
        default=0.0,
        metavar="SECONDS",
        help="stop the program and finish the trace after SECONDS",
    )
    run.add_argument(
        "--follow-children",
        action="store_true",
        help="also record Python child processes (multiprocessing, subprocess)",
    )
    run.add_argument(
        "--system",
        action="store_true",
        help="instead of a file, send the calls to the system's traced "
        "(PERFETTO_PRODUCER_SOCK_NAME or the default socket): sessions recording track_event "
        "get them",
    )
    run.add_argument(
        "--otel",
        action="store_true",
        help="record the program's OpenTelemetry spans: every SDK TracerProvider it creates "
        "gets perfetto_client.otel.PerfettoSpanProcessor (needs perfetto-client[otel])",
    )
    run.add_argument(
        "--logging",
        type=_parse_level,
        default=None,
        metavar="LEVEL",
        help="record the root logger's records from LEVEL on as log messages "
        "(perfetto_client.logging.PerfettoLogHandler)",
    )
    run.add_argument(
        "--sched",
        action="store_true",
        help="also record the scheduling of every CPU (ftrace; root or access to tracefs) "
        "and the processes and threads it names, so the trace shows when each thread ran",
    )
    run.add_argument("--pure", action="store_true", help="use the pure-Python hook")
    run.add_argument(
        "--open",
        action="store_true",
        help="then serve the trace once to https://ui.perfetto.dev on 127.0.0.1 and open it there",
    )
    run.add_argument(
        "--port", type=_parse_port, default=DEFAULT_UI_PORT, help="--open's port (%(default)s)"
    )
    run.add_argument(
        "--html", metavar="OUT.html", help="then write the trace's HTML report (report --html)"
    )
    run.add_argument("-q", "--quiet", action="store_true", help="print no summary")
    run.add_argument(
        "program",
        nargs=argparse.REMAINDER,
        help="the script and its arguments (or the module's arguments)",
    )
    open_ = commands.add_parser(
        "open", usage=OPEN_USAGE, help="serve a trace once to https://ui.perfetto.dev and open it"
    )
    open_.add_argument("file", help="the trace file")
    open_.add_argument("--port", type=_parse_port, default=DEFAULT_UI_PORT, help="(%(default)s)")
    report = commands.add_parser(
        "report",
        usage=REPORT_USAGE,
        help="print a trace's top functions by total and self time and its slowest calls",
    )
    report.add_argument("file", help="the trace file")
    report.add_argument(
        "--limit", type=_parse_limit, default=20, metavar="N", help="rows per table (%(default)s)"
    )
    report.add_argument("--json", action="store_true", help="print the report as JSON")
    report.add_argument(
        "--html",
        metavar="OUT.html",
        help="write a flame graph, timeline and table as one HTML page",
    )
    return parser


def _split_run(
    run: argparse.ArgumentParser, args: list[str]
) -> tuple[list[str], str | None, list[str]]:
    """`run`'s own options, the module (or None) and the program's arguments (script first).

    As on python's command line, everything after the script or `-m MODULE` is the
    program's, options and a `--` included.
    """
    with_value = {o for a in run._actions if a.nargs != 0 for o in a.option_strings}
    long_options = [o for a in run._actions for o in a.option_strings if o.startswith("--")]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return args[:i], None, args[i + 1 :]
        if not arg.startswith("-") or arg == "-":
            return args[:i], None, args[i:]
        takes_next = False
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            known = (
                [name] if name in long_options else [o for o in long_options if o.startswith(name)]
            )
            takes_next = "=" not in arg and bool(known) and all(o in with_value for o in known)
        else:
            for j in range(1, len(arg)):  # a cluster of short options: -q, -qo out, -qmjson.tool
                if arg[j] == "m" and (j + 1 < len(arg) or i + 1 < len(args)):
                    own = [*args[:i], arg[:j]] if j > 1 else args[:i]
                    if j + 1 < len(arg):
                        return own, arg[j + 1 :], args[i + 1 :]
                    return own, args[i + 1], args[i + 2 :]
                if f"-{arg[j]}" in with_value:
                    takes_next = j + 1 == len(arg)
                    break
        i += 2 if takes_next else 1
    return args, None, []


def _run_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices["run"]  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    """The `perfetto-trace` command."""
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    if argv[:1] == ["run"]:
        own, module, program_args = _split_run(_run_parser(parser), argv[1:])
        args = parser.parse_args(["run", *own])
        args.module, args.program = module, program_args
    else:
        args = parser.parse_args(argv)
    if args.command == "open":
        return _serve(args.file, args.port)
    if args.command == "report":
        return _report(args.file, args.limit, args.json, args.html)
    if args.command != "run":
        print(f"usage: {USAGE}\n       {OPEN_USAGE}\n       {REPORT_USAGE}", file=sys.stderr)
        return 1
    if args.module is None and not args.program:
        print("perfetto-trace: run needs a script or -m module", file=sys.stderr)
        return 1
    if args.open and args.system:
        print(
            "perfetto-trace: --open does not go with --system (traced has the trace)",
            file=sys.stderr,
        )
        return 1
    if args.html and args.system:
        print(
            "perfetto-trace: --html does not go with --system (traced has the trace)",
            file=sys.stderr,
        )
        return 1
    if args.snapshot_trigger and not args.ring:
        print("perfetto-trace: --snapshot-trigger needs --ring", file=sys.stderr)
        return 1
    if args.system and (args.otel or args.logging is not None):
        print(
            "perfetto-trace: --otel and --logging record into a file, not --system", file=sys.stderr
        )
        return 1
    options = TraceOptions(
        output=args.output,
        include=tuple(args.include),
        exclude=tuple(args.exclude),
        max_depth=args.max_depth,
        min_duration_ns=args.min_duration,
        c_calls=not args.no_c_calls,
        gc=not args.no_gc,
        exception_types=args.exception_types,
        ring_mb=args.ring,
        max_size_mb=args.max_size,
        snapshot_triggers=tuple(args.snapshot_trigger),
        follow_children=args.follow_children,
        system=args.system,
        otel=args.otel,
        log_level=args.logging,
        pure=args.pure,
        sched=args.sched,
    )
    try:
        if args.module is not None:
            program = Program(args.module, list(args.program), module=True)
        else:
            program = Program(args.program[0], list(args.program[1:]), module=False)
    except TracingError as exc:
        print(f"perfetto-trace: {exc}", file=sys.stderr)
        return 1
    except SyntaxError as exc:
        # As python shows it: the error's own block, none of perfetto-trace's frames.
        sys.excepthook(type(exc), exc.with_traceback(None), None)
        return 1
    return _run(
        program, options, args.duration, args.quiet, args.port if args.open else 0, args.html
    )


def _serve(path: str, port: int) -> int:
    from perfetto_client._tracer._open_in_ui import serve_once  # http.server, 50 ms of CPU

    return serve_once(path, port)


def _report(path: str, limit: int, as_json: bool, html: str | None = None) -> int:
    # 14 ms of CPU, for `perfetto-trace report` only.
    from perfetto_client._tracer._report import ReportError, print_report

    try:
        if html is not None:
            return _html(path, limit, html, as_json)
        print_report(path, limit, as_json, sys.stdout)
    except ReportError as exc:
        print(f"perfetto-trace: {exc}", file=sys.stderr)
        return 1
    return 0


def _html(path: str, limit: int, out: str, as_json: bool, lacks: list[str] | None = None) -> int:
    from perfetto_client._tracer._html_report import write_html_report

    if as_json:
        print("perfetto-trace: --json and --html do not go together", file=sys.stderr)
        return 1
    try:
        lacks, folded, truncated = write_html_report(path, out, limit, lacks or [])
    except OSError as exc:
        print(f"perfetto-trace: cannot write {out}: {exc.strerror}", file=sys.stderr)
        return 1
    incomplete = " (marked incomplete)" if lacks else ""
    print(f"perfetto-trace: wrote {os.path.abspath(out)}{incomplete}", file=sys.stderr)
    for line in lacks + folded:
        print(f"perfetto-trace: {line}", file=sys.stderr)
    return 1 if truncated else 0


def _run(  # noqa: PLR0917 (the command's settings in order)
    program: Program,
    options: TraceOptions,
    duration: float,
    quiet: bool,
    open_port: int = 0,
    html: str | None = None,
) -> int:
    recording = Recording(options)

    def on_sigterm(signum: int, frame: types.FrameType | None) -> None:
        raise _Terminated(signum)

    early: list[int] = []  # SIGUSR1 before the recording ran: its snapshot comes at the start

    def on_sigusr1(signum: int, frame: types.FrameType | None) -> None:
        if not options.ring_mb:
            return
        if not recording.active:
            early.append(signum)
            return
        recording.write_snapshot(wait=False)

    handlers = {signal.SIGTERM: on_sigterm, signal.SIGUSR1: on_sigusr1}
    if duration:
        handlers[signal.SIGALRM] = on_sigterm
    for signum, handler in handlers.items():
        _SAVED_HANDLERS[signum] = signal.signal(signum, handler)
    release_snapshot_signal()  # a SIGUSR1 sent while perfetto-trace loaded is handled now
    program.prepare()
    # Started first so that its thread is not recorded.
    progress = _Progress(options.output) if _progress_wanted(quiet) else None
    try:
        recording.start()
    except TracingError as exc:
        if progress is not None:
            progress.stop()
        print(f"perfetto-trace: {exc}", file=sys.stderr)
        return 1
    if early:
        on_sigusr1(signal.SIGUSR1, None)
    if duration:  # counted from the start of the recording, not of perfetto-trace
        signal.setitimer(signal.ITIMER_REAL, duration)
    exit_code, reraise_signal = _run_program(program, recording, duration)
    if not recording.active:
        # A forked child of the program that ended through here (sys.exit, the module's end):
        # the recording, its file and its summary are the parent's. A followed child
        # (--follow-children) finishes its own part at exit.
        return _end(_flush_stdout(exit_code), reraise_signal)
    if duration:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if not reraise_signal:
        recording.wait_for_threads()
    if progress is not None:
        progress.stop()
    summary = recording.stop()
    if not quiet:
        for line in summary.lines():
            print(line, file=sys.stderr)
    exit_code = _flush_stdout(exit_code)
    if html is not None:
        # The recording's own losses (a size cap, a write error) go on the page too.
        lost = summary.lines()[0].removeprefix("perfetto-trace: ")
        lacks = [lost] if summary.events_lost or summary.partial else []
        exit_code = _html(summary.path, 20, html, False, lacks) or exit_code
    if open_port and not summary.system and not summary.incomplete and not reraise_signal:
        return _serve(summary.path, open_port) or exit_code
    return _end(exit_code, reraise_signal)


def _run_program(program: Program, recording: Recording, duration: float) -> tuple[int, int]:
    """Runs the program; its exit status, and the signal that ended it (0 if none)."""
    try:
        program.run()
    except SystemExit as exc:
        return _exit_code(exc.code), 0
    except _Terminated as exc:
        if exc.signum == signal.SIGALRM:
            print(f"perfetto-trace: stopped the program after {duration:g} s", file=sys.stderr)
            return 0, 0
        return 0, exc.signum
    except KeyboardInterrupt as exc:
        recording.record_uncaught(exc)
        _print_exception(exc)
        return 0, signal.SIGINT
    except BaseException as exc:
        recording.record_uncaught(exc)
        _print_exception(exc)
        return 1, 0
    return 0, 0


# _run starts the recording and _run_program runs the program: their frames are not recorded,
# the program is.
TRANSPARENT.update((_run.__code__, _run_program.__code__))


def _end(exit_code: int, reraise_signal: int) -> int:
    """Dies by `reraise_signal` as the program would have, if any; else `exit_code`."""
    if reraise_signal:
        signal.signal(reraise_signal, signal.SIG_DFL)
        os.kill(os.getpid(), reraise_signal)
    return exit_code


def _flush_stdout(exit_code: int) -> int:
    """Flushes the program's stdout as python does at exit (a closed one is left alone)."""
    stdout = sys.stdout
    if stdout is None or stdout.closed:
        return exit_code
    try:
        stdout.flush()
    except Exception as exc:
        print(f"Exception ignored in: {stdout!r}\n{type(exc).__name__}: {exc}", file=sys.stderr)
        return exit_code or 120
    return exit_code


def _print_exception(exc: BaseException) -> None:
    """Prints `exc` as the interpreter would, without the tracer's frames."""
    tb = without_own_frames(exc.__traceback__)
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


_SAVED_HANDLERS: dict[int, Any] = {}


def _restore_handlers_in_child() -> None:
    # A forked child of the program is not the program run by perfetto-trace.
    for signum, handler in _SAVED_HANDLERS.items():
        signal.signal(signum, handler)
    _SAVED_HANDLERS.clear()


on_fork_in_child(_restore_handlers_in_child)


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _progress_wanted(quiet: bool) -> bool:
    """The progress line is drawn on a terminal that the program's stdout does not write to."""
    if quiet or not sys.stderr.isatty():
        return False
    try:
        return not os.path.samestat(os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno()))
    except (OSError, ValueError, AttributeError):
        return True  # no stdout


class _Progress:
    """One line on stderr (a terminal) with the elapsed time and the trace's size."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._stop = threading.Event()
        self._start = time.monotonic()
        self._thread = threading.Thread(
            target=self._loop, name="perfetto-trace progress", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            try:
                size = os.path.getsize(self._path) / (1 << 20)
            except OSError:
                size = 0.0
            elapsed = time.monotonic() - self._start
            sys.stderr.write(f"\rperfetto-trace: {elapsed:6.1f} s, {size:8.1f} MB written ")
            sys.stderr.flush()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        sys.stderr.write("\r" + " " * 60 + "\r")
