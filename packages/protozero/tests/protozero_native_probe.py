"""Writes random messages with a seed and prints their bytes; run under each build to compare.

python protozero_native_probe.py SEED COUNT
"""

from __future__ import annotations

import random
import sys

from protozero import Message, ScatteredStreamWriter, WritableBuffer


class _RandomRanges:
    """Ranges of random sizes inside padded buffers, like chunks of a shared memory buffer."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.ranges: list[tuple[bytearray, int]] = []
        self.writer: ScatteredStreamWriter | None = None

    def get_new_buffer(self) -> tuple[WritableBuffer, int, int]:
        size = self.rng.choice((self.rng.randint(5, 16), self.rng.randint(16, 300)))
        buf = bytearray(b"\xa5" * (size + 8))
        self.ranges.append((buf, 4))
        return buf, 4, 4 + size


def write_random(rng: random.Random) -> bytes:
    """One random message (every writer method, nesting up to 4 levels) over random ranges."""
    ranges = _RandomRanges(rng)
    writer = ScatteredStreamWriter(ranges)
    root = Message()
    root.reset(writer)
    stack = [root]
    for _ in range(rng.randint(0, 60)):
        m = stack[-1]
        op = rng.randrange(9)
        field = rng.choice((1, 15, 16, 2047, 2048, 536870911))
        if op == 0:
            m.append_varint(field, rng.choice((0, 1, 127, 128, rng.getrandbits(64), -1)))
        elif op == 1:
            m.append_zigzag(field, rng.randint(-(1 << 63), (1 << 63) - 1))
        elif op == 2:
            m.append_string(field, "é" * rng.randint(0, 3) + "x" * rng.randint(0, 200))
        elif op == 3:
            m.append_bytes(field, rng.randbytes(rng.choice((0, 5, 127, 128, 400))))
        elif op == 4:
            m.append_fixed32(field, rng.getrandbits(32))
        elif op == 5:
            m.append_double(field, rng.random())
        elif op == 6 and len(stack) < 5:
            stack.append(m.begin_nested_message(field, Message))
        elif op == 7 and len(stack) > 1:
            stack.pop().finalize()
        else:
            m.append_packed_varints(field, [rng.getrandbits(20) for _ in range(rng.randint(0, 9))])
    root.finalize()
    end = writer.write_ptr
    parts = [bytes(buf[begin:]) for buf, begin in ranges.ranges[:-1]]
    if ranges.ranges:
        buf, begin = ranges.ranges[-1]
        parts.append(bytes(buf[begin:end]))
    return b"".join(parts)


def main(seed: int, count: int) -> None:
    """Prints the hex of `count` random messages drawn from `seed`, one per line."""
    rng = random.Random(seed)
    for _ in range(count):
        print(write_random(rng).hex())


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
