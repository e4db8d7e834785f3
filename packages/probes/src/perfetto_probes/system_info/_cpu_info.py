"""The machine's CPUs, from /proc/cpuinfo and /sys/devices/system/cpu."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Cpu", "parse_cpuinfo", "parse_frequencies"]


@dataclass
class Cpu:
    """One CPU as /proc/cpuinfo lists it."""

    index: int
    processor: str
    frequencies: list[int] = field(default_factory=list)
    capacity: int | None = None


def parse_cpuinfo(text: str) -> list[Cpu]:
    """One Cpu per "processor : N" block; `processor` is the "Processor" line (ARM's model
    line, anywhere in the file) or "unknown", as upstream."""
    indexes: list[int] = []
    processor = "unknown"
    for line in text.split("\n"):
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor" and value.isdigit():
            indexes.append(int(value))
        elif key == "Processor":
            processor = value
    return [Cpu(index, processor) for index in indexes]


def parse_frequencies(text: str, *, first_column: bool) -> list[int]:
    """kHz values: every word of scaling_available_frequencies, or the first column of
    stats/time_in_state (`first_column`); words that are not numbers are left out."""
    words: list[str] = []
    for line in text.split("\n"):
        columns = line.split()
        words += columns[:1] if first_column else columns
    return [int(word) for word in words if word.isdigit()]
