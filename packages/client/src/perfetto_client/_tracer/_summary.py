"""What a finished recording wrote, and the lines `perfetto-trace` prints about it."""

from __future__ import annotations

_FIELDS = (
    "path",
    "size",
    "events_written",
    "events_lost",
    "lost_reason",
    "span_ns",
    "processes",
    "system",
    "build",
    "incomplete",
    "cut",
    "sched",
)


class Summary:
    """What a finished recording wrote.

    `build` is which profile hook ran ("compiled" or "pure"); `incomplete` says a write error
    stopped the recording (the file is not offered for opening); `cut` is what the size cap
    cut (`SinkStats.cut`): the trace is partial, whole up to the cut. `sched` says what
    `--sched` recorded and lost, or why it recorded nothing ("": not asked for).
    """

    __slots__ = _FIELDS

    def __init__(  # noqa: PLR0917 (the fields in order, as the recorders pass them)
        self,
        path: str,
        size: int,
        events_written: int,
        events_lost: int,
        lost_reason: str,
        span_ns: int,
        processes: int,
        system: bool = False,
        build: str = "",
        incomplete: bool = False,
        cut: str = "",
        sched: str = "",
    ) -> None:
        self.path = path
        self.size = size
        self.events_written = events_written
        self.events_lost = events_lost
        self.lost_reason = lost_reason
        self.span_ns = span_ns
        self.processes = processes
        self.system = system
        self.build = build
        self.incomplete = incomplete
        self.cut = cut
        self.sched = sched

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _FIELDS)
        return f"Summary({fields})"

    @property
    def partial(self) -> bool:
        """True when the trace lacks events it should hold: a write error or the size cap."""
        return self.incomplete or bool(self.cut)

    def lines(self) -> list[str]:
        """The summary as `perfetto-trace` prints it."""
        reason = "; ".join(filter(None, (self.lost_reason, self.cut)))
        lost = f"{self.events_lost:,} lost ({reason})" if self.events_lost else "0 lost"
        if not self.events_lost and reason:
            lost = f"0 lost; {reason}"
        procs = f" from {self.processes} processes" if self.processes > 1 else ""
        build = f" ({self.build} hook)" if self.build else ""
        if self.system:
            return [
                f"perfetto-trace: sent {self.events_written:,} events ({_size(self.size)}) to "
                f"{self.path}, {lost}, spanning {self.span_ns / 1e9:.3f} s{build}"
            ]
        wrote = (
            f"perfetto-trace: wrote {self.path} ({_size(self.size)}): "
            f"{self.events_written:,} events{procs}, {lost}, "
            f"spanning {self.span_ns / 1e9:.3f} s{build}"
        )
        lines = [wrote]
        if self.sched:
            lines.append(f"perfetto-trace: {self.sched}")
        if not self.incomplete:
            lines.append(
                f"perfetto-trace: open it by dragging {self.path} into https://ui.perfetto.dev"
            )
        return lines


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB"):
        if n < 1024 or unit == "MiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError
