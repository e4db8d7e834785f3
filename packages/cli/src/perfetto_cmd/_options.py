"""The `perfetto` command line: upstream's flags, parsed into `Options`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from perfetto_cmd._errors import CliError

__all__ = ["USAGE", "Options", "UsageError", "parse_options"]

USAGE = """\
Usage: perfetto [OPTIONS] [CATEGORY...]

Normal mode (the whole trace config in a file):
  --config         -c FILE : TraceConfig file, or - for stdin (binary unless --txt)
  --txt                    : the config is in protobuf text format
  --txt-lossy              : like --txt, but drops unknown fields instead of failing
  --out            -o FILE : where the trace goes, or - for stdout; with CLONE_SNAPSHOT
                             triggers each snapshot goes to FILE.0, FILE.1, ...
  --no-clobber             : refuse to overwrite an existing output file
  --add-attribute K[=V]    : add a trace attribute (key/value describing the trace)

Light mode (no --config):
  --time           -t N[ms,s,m,h] : duration (default 10s)
  --buffer         -b N[kb,mb,gb] : ring buffer size (default 32mb)
  --size           -s N[kb,mb,gb] : max file size; streams into the file while tracing
  --app            -a APP         : atrace app (Android only: reported as ignored here)
  CATEGORY                        : track_event category (ftrace GROUP/NAME events are
                                    reported as ignored: there is no ftrace here)

Background and detach:
  --background      -d     : go to the background at once and print its pid
  --background-wait -D     : like --background, after all data sources started (30 s max)
  --notify-fd FD           : write one status byte to FD once data sources started
                             (0 on success) and close it
  --detach=KEY             : leave the session running in the service under KEY
                             (the config must use write_into_file)
  --attach=KEY [--stop]    : re-attach to a detached session (and stop it)
  --is_detached=KEY        : exit 0 if KEY names a detached session, 2 if not, 1 on error

Service:
  --query [--long]         : print the service state (--long: no truncation)
  --query-raw              : print the serialized TracingServiceState
  --clone TSID             : save a read-only snapshot of the running session TSID
  --clone-by-name NAME     : same, for the session with this unique_session_name
  --clone-for-bugreport    : with --clone: skip the session's trace_filter

Traces:
  --summary TRACE          : print a text summary of a trace file

  --version                : print the version
  --help           -h      : this text
"""


class UsageError(CliError):
    """A command line that cannot be run (one line, exit status 1)."""


@dataclass
class Options:
    """Everything the command line asked for."""

    config_file: str | None = None
    out: str | None = None
    txt: bool = False
    txt_lossy: bool = False
    no_clobber: bool = False
    attributes: list[tuple[str, str]] = field(default_factory=list)
    background: bool = False
    background_wait: bool = False
    notify_fd: int | None = None
    time: str | None = None
    buffer: str | None = None
    size: str | None = None
    apps: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    detach_key: str | None = None
    attach_key: str | None = None
    is_detached: bool = False
    stop: bool = False
    query: bool = False
    query_long: bool = False
    query_raw: bool = False
    clone_tsid: int | None = None
    clone_name: str | None = None
    clone_for_bugreport: bool = False
    summary: str | None = None
    version: bool = False
    help: bool = False
    reset_guardrails: bool = False
    statsd: dict[str, int] = field(default_factory=dict)

    @property
    def has_light_options(self) -> bool:
        """Whether any light-mode flag or category was given."""
        return bool(
            self.time is not None
            or self.buffer is not None
            or self.size is not None
            or self.apps
            or self.categories
        )

    @property
    def is_clone(self) -> bool:
        """Whether this run clones a session."""
        return self.clone_tsid is not None or self.clone_name is not None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see perfetto --help)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="perfetto", add_help=False, allow_abbrev=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("-c", "--config")
    p.add_argument("-o", "--out")
    p.add_argument("-d", "--background", action="store_true")
    p.add_argument("-D", "--background-wait", action="store_true")
    p.add_argument("-t", "--time")
    p.add_argument("-b", "--buffer")
    p.add_argument("-s", "--size")
    p.add_argument("-a", "--app", action="append", default=[])
    p.add_argument("--txt", action="store_true")
    p.add_argument("--txt-lossy", action="store_true")
    p.add_argument("--no-clobber", action="store_true")
    p.add_argument("--add-attribute", action="append", default=[])
    p.add_argument("--notify-fd")
    p.add_argument("--detach")
    p.add_argument("--attach")
    p.add_argument("--is_detached")
    p.add_argument("--stop", action="store_true")
    p.add_argument("--query", action="store_true")
    p.add_argument("--long", action="store_true")
    p.add_argument("--query-raw", action="store_true")
    p.add_argument("--clone")
    p.add_argument("--clone-by-name")
    p.add_argument("--clone-for-bugreport", action="store_true")
    p.add_argument("--summary")
    p.add_argument("--version", action="store_true")
    p.add_argument("--upload", action="store_true")
    p.add_argument("--dropbox")
    p.add_argument("--save-for-bugreport", action="store_true")
    p.add_argument("--save-all-for-bugreport", action="store_true")
    p.add_argument("--no-guardrails", action="store_true")
    p.add_argument("--reset-guardrails", action="store_true")
    for name in ("--alert-id", "--config-id", "--config-uid", "--subscription-id"):
        p.add_argument(name)
    p.add_argument("categories", nargs="*")
    return p


def _attribute(text: str) -> tuple[str, str]:
    key, _, value = text.partition("=")
    if not key:
        raise UsageError("add-attribute: key must be non-empty")
    return key, value


def _integer(flag: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"{flag} wants an integer, got {text!r}") from None


def _nonempty(flag: str, text: str | None) -> str | None:
    if text is not None and not text:
        raise UsageError(f"{flag} wants a non-empty key")
    return text


def parse_options(argv: Sequence[str]) -> Options:
    """Parses the arguments (without the program name); `UsageError` if they are wrong."""
    args = _parser().parse_intermixed_args(list(argv))
    if args.upload or args.dropbox is not None:
        raise UsageError(f"--{'upload' if args.upload else 'dropbox'} is only supported on Android")
    if args.save_for_bugreport or args.save_all_for_bugreport:
        raise UsageError("--save-for-bugreport is only supported on Android")
    opts = Options(
        config_file=args.config,
        out=args.out,
        txt=args.txt,
        txt_lossy=args.txt_lossy,
        no_clobber=args.no_clobber,
        attributes=[_attribute(a) for a in args.add_attribute],
        background=args.background or args.background_wait,
        background_wait=args.background_wait,
        notify_fd=None if args.notify_fd is None else _integer("--notify-fd", args.notify_fd),
        time=args.time,
        buffer=args.buffer,
        size=args.size,
        apps=list(args.app),
        categories=list(args.categories),
        detach_key=_nonempty("--detach", args.detach),
        attach_key=_nonempty("--attach", args.attach)
        or _nonempty("--is_detached", args.is_detached),
        is_detached=args.is_detached is not None,
        stop=args.stop,
        query=args.query or args.query_raw,
        query_long=args.long,
        query_raw=args.query_raw,
        clone_tsid=None if args.clone is None else _integer("--clone", args.clone),
        clone_name=args.clone_by_name,
        clone_for_bugreport=args.clone_for_bugreport,
        summary=args.summary,
        version=args.version,
        help=args.help,
        reset_guardrails=args.reset_guardrails,
    )
    for flag, key in (
        ("--alert-id", "triggering_alert_id"),
        ("--config-id", "triggering_config_id"),
        ("--config-uid", "triggering_config_uid"),
        ("--subscription-id", "triggering_subscription_id"),
    ):
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            opts.statsd[key] = _integer(flag, value)
    _check_combinations(opts)
    return opts


def _check_combinations(opts: Options) -> None:
    """Upstream's rules on which flags go together."""
    attach = opts.attach_key is not None
    detach = opts.detach_key is not None
    if opts.query and (attach or detach or opts.background):
        raise UsageError("--query cannot be combined with any other argument")
    if opts.query_long and not opts.query:
        raise UsageError("--long can only be used with --query")
    if attach and detach:
        raise UsageError("--attach and --detach are mutually exclusive")
    if opts.txt and opts.txt_lossy:
        raise UsageError("--txt and --txt-lossy are mutually exclusive")
    if detach and opts.background:
        raise UsageError("--detach and --background are mutually exclusive")
    if opts.stop and not attach:
        raise UsageError("--stop is supported only in combination with --attach")
    if opts.clone_tsid is not None and opts.clone_name is not None:
        raise UsageError("--clone and --clone-by-name are mutually exclusive")
    if opts.clone_for_bugreport and not opts.is_clone:
        raise UsageError("--clone-for-bugreport requires --clone or --clone-by-name")
