"""`perfetto`: parses the command line, prepares config and output, runs the session."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from perfetto_cmd._command_version import version_line
from perfetto_cmd._errors import CliError, log
from perfetto_cmd._options import USAGE, Options, parse_options

# What a session needs (protobuf, the service's IPC client) loads when one runs: `--help`,
# `--version` and a mistyped flag answer without it.
if TYPE_CHECKING:
    from perfetto_protos.config.trace_config_pb2 import TraceConfig

__all__ = ["main"]


def _read_config_bytes(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise CliError(f"Could not open {path}: {exc.strerror}") from None


def _trace_config(opts: Options) -> TraceConfig:
    """The config to trace with (normal or light mode), with upstream's checks and additions."""
    import uuid

    from perfetto_protos.config.trace_config_pb2 import TraceConfig

    from perfetto_cmd._config import (
        config_from_light_options,
        parse_binary_config,
        parse_text_config,
    )

    if opts.has_light_options:
        if opts.config_file is not None:
            raise CliError(
                "Cannot specify both -c/--config and any of --time, --size, --buffer, --app, "
                "ATRACE_CAT, FTRACE_EVENT"
            )
        light = config_from_light_options(
            opts.time, opts.buffer, opts.size, opts.apps, opts.categories
        )
        for what in light.ignored:
            log(f"Ignoring {what}: not available on this system (no ftrace/atrace here)")
        config = light.config
    else:
        if opts.config_file is None:
            raise CliError("The TraceConfig is empty")
        raw = _read_config_bytes(opts.config_file)
        if not raw:
            raise CliError("The TraceConfig is empty")
        if opts.txt or opts.txt_lossy:
            try:
                text = raw.decode()
            except UnicodeDecodeError:
                raise CliError(f"{opts.config_file}: the text config is not UTF-8") from None
            config = parse_text_config(text, opts.config_file, lossy=opts.txt_lossy)
        else:
            config = parse_binary_config(raw)
    for key, value in opts.statsd.items():
        setattr(config.statsd_metadata, key, value)
    if not config.trace_uuid_lsb and not config.trace_uuid_msb:
        trace_uuid = uuid.uuid4().int
        msb, lsb = trace_uuid >> 64, trace_uuid & (1 << 64) - 1
        lsb = opts.statsd.get("triggering_subscription_id") or lsb
        config.trace_uuid_msb = msb - (1 << 64) if msb >= 1 << 63 else msb
        config.trace_uuid_lsb = lsb - (1 << 64) if lsb >= 1 << 63 else lsb
    delay = config.cmd_trace_start_delay
    if delay.HasField("min_delay_ms") != delay.HasField("max_delay_ms"):
        raise CliError("cmd_trace_start_delay field is only partially specified.")
    if config.incident_report_config.destination_package:
        raise CliError("Unexpected IncidentReportConfig without --dropbox / --upload.")
    if config.android_report_config.reporter_service_package:
        raise CliError("Unexpected AndroidReportConfig without --dropbox / --upload.")
    if config.statsd_logging == TraceConfig.STATSD_LOGGING_UNSPECIFIED:
        config.statsd_logging = TraceConfig.STATSD_LOGGING_DISABLED
    for name, text in opts.attributes:
        config.trace_attributes.attribute.add(key=name, string_value=text)
    if config.output_path:
        if opts.out is not None:
            raise CliError("Can't pass --out or --upload if output_path is set in the trace config")
        if os.path.exists(config.output_path):
            raise CliError(
                "The output_path must not exist, the service cannot overwrite existing files "
                f"for security reasons. Remove {config.output_path} or use a different path."
            )
    return config


def _clone(opts: Options) -> int:
    """`--clone TSID` / `--clone-by-name NAME`: a snapshot of a running session into --out."""
    from perfetto_cmd._output import TraceOutput
    from perfetto_cmd._perfetto_cmd import SessionRunner

    if opts.has_light_options or opts.config_file is not None:
        raise CliError("Cannot specify a trace config with this option")
    if opts.out is None:
        raise CliError("Either --out or --upload is required")
    output = TraceOutput(opts.out, no_clobber=opts.no_clobber)
    runner = SessionRunner(None, output, clone_tsid=opts.clone_tsid, clone_name=opts.clone_name)
    try:
        return runner.run()
    finally:
        output.close()


def _run(opts: Options) -> int:
    if opts.help:
        sys.stderr.write(USAGE)
        return 1
    if opts.version:
        print(version_line("perfetto"))
        return 0
    from perfetto_cmd._perfetto_cmd import SessionRunner, daemonize

    if opts.reset_guardrails:
        log(
            "Guardrails no longer exist in perfetto_cmd; this option only exists for "
            "backwards compatibility."
        )
        return 0
    if opts.summary is not None:
        from perfetto_cmd._summary import summarize_file

        return summarize_file(opts.summary, sys.stdout)
    if opts.is_clone:
        return _clone(opts)
    from perfetto_cmd._output import TraceOutput
    from perfetto_cmd._trigger import activate_triggers

    will_trace = opts.attach_key is None and not opts.query
    if not will_trace:
        if opts.config_file is not None or opts.has_light_options:
            raise CliError("Cannot specify a trace config with this option")
        if opts.out is not None:
            raise CliError("Can't pass an --out file (or --upload) with this option")
        runner = SessionRunner(
            None,
            None,
            attach_key=opts.attach_key,
            is_detached=opts.is_detached,
            stop_once_attached=opts.stop,
            query=opts.query,
            query_long=opts.query_long,
            query_raw=opts.query_raw,
        )
        return runner.run()
    config = _trace_config(opts)
    if config.activate_triggers:
        return 0 if activate_triggers(list(config.activate_triggers)) else 1
    output: TraceOutput | None = None
    if not (config.write_into_file and config.output_path):
        if opts.out is None:
            raise CliError("Either --out or --upload is required")
        if opts.detach_key is not None and not config.write_into_file:
            raise CliError("TraceConfig's write_into_file must be true when using --detach")
        output = TraceOutput(opts.out, no_clobber=opts.no_clobber)
    if opts.background:
        status = daemonize(opts.background_wait)
        if status is not None:
            return status
    runner = SessionRunner(
        config,
        output,
        detach_key=opts.detach_key,
        notify_fd=opts.notify_fd,
        progress=not opts.background and opts.detach_key is None and sys.stderr.isatty(),
    )
    try:
        return runner.run()
    finally:
        if output is not None:
            output.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `perfetto`; returns the exit status. User mistakes are one line on stderr."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stderr.write(USAGE)
        return 1
    try:
        return _run(parse_options(args))
    except CliError as exc:
        log(f"perfetto: {exc}")
        return 1
    except KeyboardInterrupt:
        return 1
