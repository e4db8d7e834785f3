"""`heap_profile`: one command that records a heap profile of a Python program.

Starts what is missing (our `traced` and the heapprofd daemon, on private sockets), runs the
program with the client loaded, records a session with a HeapprofdConfig for its pid, stops
when the program exits and writes the trace. The daemons are forks of this process, which has
loaded their modules: interpreters of their own would each load the service stack again.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import BinaryIO

from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_service import consumer_socket_name

from heapprofd._command_line import Parser, python_program_problem
from heapprofd._errors import HeapprofdError
from heapprofd._preload import NATIVE_HEAP, library_path, native_unavailable
from heapprofd._recorder import Recorder
from heapprofd._wire import SOCKET_ENV, default_socket_path

__all__ = ["main", "trace_config", "traced_command"]

_START_TIMEOUT_S = 30.0
_PROFILE_WAIT_S = "20"


def trace_config(
    pid: int,
    interval: int,
    *,
    all_heaps: bool = False,
    block_client: bool = False,
    shmem_size: int = 0,
    continuous_dump_ms: int = 0,
    buffer_kb: int = 64 * 1024,
    heaps: tuple[str, ...] = (),
) -> TraceConfig:
    """A session with one `android.heapprofd` data source for `pid` (`heaps` empty: the
    default heap, `python`)."""
    config = TraceConfig()
    config.buffers.add(size_kb=buffer_kb)
    source = config.data_sources.add().config
    source.name = "android.heapprofd"
    heap = source.heapprofd_config
    heap.sampling_interval_bytes = interval
    heap.pid.append(pid)
    heap.all_heaps = all_heaps
    heap.heaps.extend(heaps)
    heap.block_client = block_client
    heap.shmem_size_bytes = shmem_size
    if continuous_dump_ms:
        heap.continuous_dump_config.dump_phase_ms = continuous_dump_ms
        heap.continuous_dump_config.dump_interval_ms = continuous_dump_ms
    return config


def _connectable(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def traced_command() -> list[str]:
    """How to start our `traced` (perfetto-service's daemon) with this interpreter."""
    return [sys.executable, "-m", "perfetto_service.traced"]


_Main = Callable[[list[str]], int]
_Daemon = tuple[BaseProcess, BinaryIO]
"""A started daemon and the read end of its stderr."""


def _run_forked(main: _Main, env: dict[str, str], stderr_fd: int) -> None:
    """The daemon's side of the fork: its environment, stdout and stderr, then `main([])`."""
    os.environ.clear()
    os.environ.update(env)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(stderr_fd, 2)
    sys.exit(main([]))


def _start_notified(name: str, main: _Main, env: dict[str, str], notify_env: str) -> _Daemon:
    read_end, write_end = os.pipe()
    err_read, err_write = os.pipe()
    env = dict(env)
    env[notify_env] = str(write_end)
    sys.stdout.flush()
    sys.stderr.flush()
    process = multiprocessing.get_context("fork").Process(
        target=_run_forked, args=(main, env, err_write), name=name
    )
    process.start()
    os.close(write_end)
    os.close(err_write)
    stderr = os.fdopen(err_read, "rb")
    try:
        ready, _, _ = select.select([read_end], [], [], _START_TIMEOUT_S)
        if not ready or os.read(read_end, 1) != b"1":
            process.kill()
            process.join()
            err = stderr.read()
            stderr.close()
            # Its last line says why (a traceback ends with the exception), whole.
            lines = err.decode(errors="replace").strip().splitlines()
            why = lines[-1] if lines else f"exit status {process.exitcode}"
            raise HeapprofdError(f"{name} did not start: {why}")
    finally:
        os.close(read_end)
    return process, stderr


def _stop(daemon: _Daemon) -> None:
    process, stderr = daemon
    if process.is_alive():
        process.terminate()
        process.join(_START_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join()
    stderr.close()


def _is_python(program: list[str]) -> bool:
    """Whether `program` is `-m module` or a `.py` script (run with the Python client)."""
    return program[0] == "-m" or program[0].endswith(".py")


class Output:
    """The trace file, opened before the program runs (so that a path that cannot be written
    is found then) and written when the session ends."""

    def __init__(self, path: str) -> None:
        self.path = path
        existed = os.path.lexists(path)
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise HeapprofdError(f"cannot write {path}: {exc.strerror}") from None
        self._created = not existed

    def discard(self) -> None:
        """Closes the file unwritten (removed when this made it)."""
        os.close(self._fd)
        if self._created:
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def write(self, data: bytes) -> str | None:
        """Writes `data` as the whole file and closes it; None, or why the trace is not whole
        there (one line, saying where a copy was kept)."""
        fd, written = self._fd, 0
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.ftruncate(fd, 0)
            view = memoryview(data)
            while written < len(data):
                written += os.write(fd, view[written:])
            os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.close(fd)
            return (
                f"cannot write {self.path}: {exc.strerror} ({written} of {len(data)} bytes"
                f" written); {_keep_elsewhere(data)}"
            )
        return None


def _keep_elsewhere(data: bytes) -> str:
    """Writes the trace to a new file in the temporary directory; says where, or that it is
    lost."""
    path = ""
    try:
        fd, path = tempfile.mkstemp(prefix="heap_profile-", suffix=".pftrace")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError as exc:
        with contextlib.suppress(OSError):
            if path:
                os.unlink(path)
        return f"the trace is lost ({path or tempfile.gettempdir()}: {exc.strerror})"
    return f"the whole trace is in {path}"


_LONGEST_SOCKET_PATH = 107
"""Bytes a UNIX socket's path may have (sun_path's 108, its NUL included)."""
_SOCKET_NAMES = ("producer", "consumer", "heapprofd")


def _socket_directory() -> str:
    """A new private directory for the daemons' sockets: in the temporary directory, or in /tmp
    where the temporary directory's path leaves no room for the sockets' names."""
    directory = tempfile.mkdtemp(prefix="heap_profile-")
    longest = max(len(os.fsencode(os.path.join(directory, n))) for n in _SOCKET_NAMES)
    if longest <= _LONGEST_SOCKET_PATH:
        return directory
    os.rmdir(directory)
    return tempfile.mkdtemp(prefix="heap_profile-", dir="/tmp")


def record(args: argparse.Namespace, out: Output, html: Output | None = None) -> int:
    env = dict(os.environ)
    started: list[_Daemon] = []
    private = None
    consumer_socket = consumer_socket_name()
    heapprofd_socket = default_socket_path()
    try:
        if not _connectable(consumer_socket):
            private = _socket_directory()
            env["PERFETTO_PRODUCER_SOCK_NAME"] = f"{private}/producer"
            env["PERFETTO_CONSUMER_SOCK_NAME"] = consumer_socket = f"{private}/consumer"
            env[SOCKET_ENV] = heapprofd_socket = f"{private}/heapprofd"
            from perfetto_service.traced import _main as traced

            started.append(
                _start_notified("perfetto_service.traced", traced.main, env, "TRACED_NOTIFY_FD")
            )
        if private is not None or not _connectable(heapprofd_socket):
            from heapprofd import _daemon, _producer  # noqa: F401 (the fork needs no import)

            started.append(_start_notified("heapprofd", _daemon.main, env, "HEAPPROFD_NOTIFY_FD"))
        recorder = Recorder(consumer_socket)
        env["HEAPPROFD_WAIT_S"] = _PROFILE_WAIT_S
        command = [sys.executable, "-m", "heapprofd", "run", "--", *args.program]
        if args.native:
            env["LD_PRELOAD"] = " ".join(filter(None, [str(library_path()), env.get("LD_PRELOAD")]))
            if not _is_python(args.program):
                command = args.program
        try:
            target = subprocess.Popen(command, env=env)
        except OSError as exc:
            raise HeapprofdError(f"cannot run {command[0]}: {exc.strerror}") from None
        try:
            recorder.start(
                trace_config(
                    target.pid,
                    args.interval,
                    all_heaps=args.all_heaps,
                    # as upstream's heap_profile: the daemon unwinds each native sample, and a
                    # program allocating at full speed outruns it
                    block_client=args.block_client or args.native,
                    shmem_size=args.shmem_size,
                    continuous_dump_ms=args.continuous_dump,
                    heaps=("python", NATIVE_HEAP) if args.native and not args.all_heaps else (),
                )
            )
            status = target.wait()
        except BaseException:
            target.kill()
            target.wait()
            raise
        data = recorder.stop()
        recorder.close()
    finally:
        for process in reversed(started):
            _stop(process)
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
    if status < 0:
        print(f"heap_profile: program killed by {signal.Signals(-status).name}", file=sys.stderr)
    else:
        print(f"heap_profile: program exited with status {status}", file=sys.stderr)
    from heapprofd._profile_summary import profile_losses  # after the program: not start-up

    for line in profile_losses(data):
        print(f"heap_profile: {line}", file=sys.stderr)
    exit_status = status if status >= 0 else 128 - status
    problem = out.write(data)
    if problem is not None:
        print(f"heap_profile: {problem}", file=sys.stderr)
        if html is not None:
            html.discard()
            print(f"heap_profile: {html.path} not written: the trace was not", file=sys.stderr)
        return exit_status or 1
    print(
        f"heap_profile: wrote {out.path} ({len(data)} bytes); open it at https://ui.perfetto.dev",
        file=sys.stderr,
    )
    if html is not None:
        return _write_html(out.path, html) or exit_status
    return exit_status


def _write_html(trace: str, html: Output) -> int:
    """Writes the page of the profile in `trace` (perfetto-trace's report); 1 if it could not
    be written (what the profile lost was said with the trace, and the page says it too)."""
    from perfetto_client.report import ReportError, write_html_report

    html.discard()  # opened to find a path that cannot be written before the program ran
    try:
        lacks, folded, _ = write_html_report(trace, html.path, 20, [])
    except ReportError as exc:
        print(f"heap_profile: no page: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"heap_profile: cannot write {html.path}: {exc.strerror}", file=sys.stderr)
        return 1
    marked = " (marked incomplete: it says why)" if lacks else ""
    print(f"heap_profile: wrote {html.path}{marked}", file=sys.stderr)
    for line in folded:
        print(f"heap_profile: {line}", file=sys.stderr)
    return 0


def _native_program_problem(program: str) -> str | None:
    """Why `--native -- PROGRAM` cannot be run (a path, or a name looked up on PATH)."""
    if "/" not in program:
        if shutil.which(program) is not None:
            return None
        here = f" (a file here is ./{program})" if os.path.exists(program) else ""
        return f"no such program on PATH: {program}{here}"
    if not os.path.exists(program):
        return f"no such file: {program}"
    if os.path.isdir(program):
        return f"cannot run {program}: it is a directory"
    if not os.access(program, os.X_OK):
        return f"cannot run {program}: it is not executable"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = Parser(
        prog="heap_profile",
        description="Records a heap profile of a Python program: heap_profile -- script.py [args]",
    )
    parser.add_argument("-o", "--output", default="heap_profile.pftrace", help="trace file")
    parser.add_argument(
        "-i", "--interval", type=int, default=4096, help="sampling interval in bytes (4096)"
    )
    parser.add_argument("--all-heaps", action="store_true", help="also profile custom heaps")
    parser.add_argument(
        "--block-client", action="store_true", help="the program waits instead of losing samples"
    )
    parser.add_argument("--shmem-size", type=int, default=0, help="ring buffer bytes (8 MiB)")
    parser.add_argument(
        "--continuous-dump", type=int, default=0, metavar="MS", help="also dump every MS ms"
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="also profile malloc and its family (heap libc.malloc) and block the client;"
        " runs any program",
    )
    parser.add_argument(
        "--html", metavar="OUT.html", help="also write the profile as a flame graph page"
    )
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- script.py [args]")
    args = parser.parse_args(argv)
    if args.program and args.program[0] == "--":
        args.program = args.program[1:]
    if not args.program:
        print("heap_profile: give a program: heap_profile -- script.py [args]", file=sys.stderr)
        return 1
    if args.interval <= 0:
        print("heap_profile: the interval must be a positive number of bytes", file=sys.stderr)
        return 1
    if args.native and (reason := native_unavailable()) is not None:
        print(f"heap_profile: --native: {reason}", file=sys.stderr)
        return 1
    # with --native, any program: a path, or a name on PATH (`heap_profile --native -- ls`)
    if args.native and not _is_python(args.program):
        problem = _native_program_problem(args.program[0])
    else:
        problem = python_program_problem(args.program)
    if problem is not None:
        print(f"heap_profile: {problem}", file=sys.stderr)
        return 1
    try:
        out = Output(args.output)
    except HeapprofdError as exc:
        print(f"heap_profile: {exc}", file=sys.stderr)
        return 1
    try:
        html = None if args.html is None else Output(args.html)
    except HeapprofdError as exc:
        out.discard()
        print(f"heap_profile: --html: {exc}", file=sys.stderr)
        return 1
    try:
        return record(args, out, html)
    except (HeapprofdError, KeyboardInterrupt) as exc:
        out.discard()
        if html is not None:
            html.discard()
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else exc
        print(f"heap_profile: {why}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
