"""ProtoZero's decoder benchmark: parsing the Nested message, protozero vs protobuf (upb).

The bytes are the Nested message of `bench_protozero.py` (Simple's five fields plus a child
filled the same way, 3 levels deep). protozero walks every field with `ProtoDecoder`, reads
each value (`as_int32`, `as_uint32`, `as_int64`, `as_uint64`, `as_string`) and descends into
the child; protobuf (upb) parses the bytes with `FromString()` and reads the same fields. Both
are timed in process CPU time, interleaved; the run prints the median ns/op and the ratio.
The ProtoDecoder-only row walks the fields without reading the values.

The run measures the build that loads, then runs itself again with PERFETTO_PY_PURE=1
(`--this-build-only` skips the second).

    python benchmarks/bench_decoder.py [--iterations N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import protozero
from bench_protozero import measure, protozero_writers, upb_classes
from protozero import ProtoDecoder

NESTED = 14  # EveryField.field_nested
READERS = {1: "as_int32", 2: "as_int64", 3: "as_uint32", 4: "as_uint64", 500: "as_string"}


def protozero_readers(data: bytes) -> tuple[Callable[[], object], Callable[[], object]]:
    """Reads every field of `data` (and of its children); walks the fields only."""

    def read(decoder: ProtoDecoder) -> list[object]:
        values: list[object] = []
        for field in decoder:
            if field.id == NESTED:
                values.append(read(field.as_message()))
            else:
                values.append(getattr(field, READERS[field.id])())
        return values

    def walk(decoder: ProtoDecoder) -> int:
        count = 0
        for field in decoder:
            count += 1
            if field.id == NESTED:
                count += walk(field.as_message())
        return count

    return (lambda: read(ProtoDecoder(data))), (lambda: walk(ProtoDecoder(data)))


def upb_reader(cls: Any, data: bytes) -> Callable[[], object]:
    """Parses `data` and reads every field of each level."""

    def read() -> list[object]:
        values: list[object] = []
        m = cls.FromString(data)
        while True:
            values += (m.field_int32, m.field_uint32, m.field_int64, m.field_uint64)
            values.append(m.field_string)
            if not m.field_nested:
                return values
            m = m.field_nested[0]

    return read


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--iterations", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--this-build-only", action="store_true")
    args = parser.parse_args()
    if protozero.COMPILED and not args.this_build_only:
        pure = {**os.environ, "PERFETTO_PY_PURE": "1"}
        subprocess.run([sys.executable, *sys.argv, "--this-build-only"], env=pure, check=True)

    cls = upb_classes()
    _, nested, _, last_bytes = protozero_writers()
    nested()
    data = last_bytes()
    read, walk = protozero_readers(data)
    upb = upb_reader(cls, data)
    if _flatten(read()) != upb():
        sys.exit("protozero and protobuf read different values")

    mode = "compiled (Cython)" if protozero.COMPILED else "pure Python"
    print(f"decoder benchmark: {mode}, {len(data)} bytes, {args.iterations} iterations")
    t_read, t_walk, t_upb = measure([read, walk, upb], args.iterations, args.repeats)
    print(f"{'case':7} {'reader':24} {'ns/op':>8} {'/upb':>7}")
    print(f"{'Nested':7} {'protobuf upb':24} {t_upb:8.0f}")
    print(f"{'Nested':7} {'protozero read':24} {t_read:8.0f} {t_read / t_upb:6.2f}x")
    print(f"{'Nested':7} {'protozero walk only':24} {t_walk:8.0f} {t_walk / t_upb:6.2f}x")
    return 0


def _flatten(values: object) -> list[object]:
    if not isinstance(values, list):
        return [values]
    return [v for item in values for v in _flatten(item)]


if __name__ == "__main__":
    sys.exit(main())
