"""The TraceConfig a run uses: a binary or text config file, or the light-mode flags."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from google.protobuf import message, text_format
from perfetto_protos import ProtosError
from perfetto_protos.config.trace_config_pb2 import TraceConfig
from perfetto_protos.upstream import upstream_message_class

from perfetto_cmd._errors import CliError

__all__ = [
    "LightConfig",
    "config_from_light_options",
    "parse_binary_config",
    "parse_size_kb",
    "parse_text_config",
    "parse_time_ms",
]

_TIME_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_SIZE_UNITS = {"kb": 1, "mb": 1024, "gb": 1024 * 1024, "k": 1, "m": 1024, "g": 1024 * 1024}
_VALUE_UNIT = re.compile(r"(\d+)([a-z]*)")


def _convert(text: str, units: dict[str, int]) -> int | None:
    if text in ("", "0"):
        return 0
    match = _VALUE_UNIT.fullmatch(text)
    if match is None or match.group(2) not in units:
        return None
    return int(match.group(1)) * units[match.group(2)]


def parse_time_ms(text: str) -> int | None:
    """`10s`, `1m`, `500ms`, `2h` in milliseconds; None if malformed."""
    return _convert(text, _TIME_UNITS)


def parse_size_kb(text: str) -> int | None:
    """`32mb`, `1gb`, `512kb` (or `m`, `g`, `k`) in KiB; None if malformed."""
    return _convert(text, _SIZE_UNITS)


def parse_binary_config(data: bytes) -> TraceConfig:
    """A binary TraceConfig; `CliError` (with upstream's `--txt` hint) if it does not parse."""
    config = TraceConfig()
    try:
        config.ParseFromString(data)
    except message.DecodeError:
        hint = ""
        if data and all(32 <= c <= 126 or 9 <= c <= 13 for c in data):
            hint = (
                " Looks like you are passing a textual config but I'm expecting a "
                "proto-encoded binary config. Try adding --txt to the cmdline."
            )
        raise CliError(f"The trace config is invalid, bailing out.{hint}") from None
    return config


def parse_text_config(text: str, file_name: str, *, lossy: bool = False) -> TraceConfig:
    """A text-format TraceConfig, read with upstream's full schema.

    Every data-source config upstream knows (ftrace, process_stats, android.*, ...) is encoded
    with upstream's field numbers, so producers get exactly what upstream's command would send.
    With `lossy`, unknown fields are dropped instead of failing.
    """
    try:
        upstream_class = upstream_message_class("perfetto.protos.TraceConfig")
    except ProtosError as exc:
        raise CliError(str(exc)) from None
    parsed = upstream_class()
    try:
        text_format.Parse(text, parsed, allow_unknown_field=lossy)
    except text_format.ParseError as exc:
        raise CliError(f"{file_name}:{exc}") from None
    config = TraceConfig()
    config.ParseFromString(parsed.SerializeToString())
    return config


@dataclass
class LightConfig:
    """A config built from light-mode flags, and what could not be mapped here."""

    config: TraceConfig
    ignored: list[str] = field(default_factory=list)


def config_from_light_options(
    time: str | None,
    buffer: str | None,
    size: str | None,
    apps: Sequence[str],
    categories: Sequence[str],
) -> LightConfig:
    """Upstream's light mode: duration, ring buffer, optional file size cap and categories.

    There is no ftrace or atrace here: categories become track_event categories, and ftrace
    `GROUP/NAME` events and atrace apps are listed in `ignored`.
    """
    duration_ms = parse_time_ms("10s" if time is None else time)
    if duration_ms is None:
        raise CliError("--time argument is invalid")
    buffer_kb = parse_size_kb("32mb" if buffer is None else buffer)
    if buffer_kb is None:
        raise CliError("--buffer argument is invalid")
    max_file_kb = parse_size_kb("" if size is None else size)
    if max_file_kb is None:
        raise CliError("--size argument is invalid")
    config = TraceConfig(
        duration_ms=duration_ms,
        max_file_size_bytes=max_file_kb * 1024,
        flush_period_ms=30_000,
    )
    if max_file_kb:
        config.write_into_file = True
    config.buffers.add(size_kb=buffer_kb)
    ignored = [f"ftrace event {c}" for c in categories if "/" in c]
    ignored += [f"atrace app {a}" for a in apps]
    track_categories = [c for c in categories if "/" not in c]
    source = config.data_sources.add().config
    source.name = "track_event"
    source.target_buffer = 0
    if track_categories:
        source.track_event_config.enabled_categories.extend(track_categories)
        source.track_event_config.disabled_categories.append("*")
    return LightConfig(config, ignored)
