"""ProtoZero's benchmark: Simple and Nested messages, protozero vs protobuf (upb) vs struct.

Simple = int32, uint32, int64, uint64 and a 32-byte string (the values of upstream's
protozero_benchmark.cc); Nested = Simple plus a child filled the same way, 3 levels deep.
protozero writes into one reused buffer through a ScatteredStreamWriter, the way a TraceWriter
does; protobuf builds a new message, sets the fields and calls SerializeToString(); the
speed-of-light writer is one `struct.pack_into` per level. Prints ns/op and ratios.

    python benchmarks/bench_protozero.py [--iterations N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import protozero
from bench_messages_pbzero import EveryField
from protozero import ScatteredStreamWriter, WritableBuffer

HERE = Path(__file__).resolve().parent
INT32 = 0x12345678
UINT32 = 0x90ABCDEF
INT64 = 0x11111111
UINT64 = 0xFFFFFFFF
STRING = "f" * 32
BUFFER_SIZE = 64 * 1024

# name -> (pure-Python target, compiled target) as a ratio to protobuf upb.
TARGETS = {"Simple": (2.5, 0.5), "Nested": (1.5, 0.3)}


class ReusedBuffer:
    """A delegate over one buffer; the benchmark rewinds the writer before each message."""

    def __init__(self) -> None:
        self.buffer = memoryview(bytearray(BUFFER_SIZE))

    def get_new_buffer(self) -> tuple[WritableBuffer, int, int]:
        return self.buffer, 0, BUFFER_SIZE


def upb_classes() -> Any:
    """The benchmark message compiled by protoc and loaded into protobuf (upb)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf.internal import api_implementation

    if api_implementation.Type() != "upb":
        sys.exit(f"protobuf backend is {api_implementation.Type()!r}, not upb")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.pb"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{HERE}",
                f"--descriptor_set_out={out}",
                str(HERE / "bench_messages.proto"),
            ],
            check=True,
            timeout=120,
        )
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fds.file[0])
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("pzbench.EveryField"))


def protozero_writers() -> tuple[Callable[[], None], Callable[[], None], Callable[[], bytes]]:
    delegate = ReusedBuffer()
    writer = ScatteredStreamWriter(delegate)
    buf = delegate.buffer
    msg = EveryField()

    def fill_simple(m: EveryField) -> None:
        m.set_field_int32(INT32)
        m.set_field_uint32(UINT32)
        m.set_field_int64(INT64)
        m.set_field_uint64(UINT64)
        m.set_field_string(STRING)

    def fill_nested(m: EveryField, depth: int) -> None:
        fill_simple(m)
        if depth < 3:
            fill_nested(m.add_field_nested(), depth + 1)

    def simple() -> None:
        writer.reset(buf, 0, BUFFER_SIZE)
        msg.reset(writer)
        fill_simple(msg)
        msg.finalize()

    def nested() -> None:
        writer.reset(buf, 0, BUFFER_SIZE)
        msg.reset(writer)
        fill_nested(msg, 0)
        msg.finalize()

    def last_bytes() -> bytes:
        return bytes(buf[: msg.finalize()])

    return simple, nested, last_bytes


def upb_writers(cls: Any) -> tuple[Callable[[], bytes], Callable[[], bytes]]:
    def fill_simple(m: Any) -> None:
        m.field_int32 = INT32
        m.field_uint32 = UINT32
        m.field_int64 = INT64
        m.field_uint64 = UINT64
        m.field_string = STRING

    def fill_nested(m: Any, depth: int) -> None:
        fill_simple(m)
        if depth < 3:
            fill_nested(m.field_nested.add(), depth + 1)

    def simple() -> bytes:
        m = cls()
        fill_simple(m)
        return bytes(m.SerializeToString())

    def nested() -> bytes:
        m = cls()
        fill_nested(m, 0)
        return bytes(m.SerializeToString())

    return simple, nested


def speed_of_light_writers() -> tuple[Callable[[], None], Callable[[], None]]:
    layout = struct.Struct("<iIqQ32s")
    pack = layout.pack_into
    buf = bytearray(BUFFER_SIZE)
    text = STRING.encode()
    size = layout.size

    def simple() -> None:
        pack(buf, 0, INT32, UINT32, INT64, UINT64, text)

    def nested() -> None:
        pack(buf, 0, INT32, UINT32, INT64, UINT64, text)
        pack(buf, size, INT32, UINT32, INT64, UINT64, text)
        pack(buf, 2 * size, INT32, UINT32, INT64, UINT64, text)
        pack(buf, 3 * size, INT32, UINT32, INT64, UINT64, text)

    return simple, nested


def measure(fn: Callable[[], object], iterations: int, repeats: int) -> float:
    """Median over `repeats` runs of the ns per call of a loop of `iterations` calls."""
    samples = []
    loop = range(iterations)
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in loop:
            fn()
        samples.append((time.perf_counter_ns() - start) / iterations)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    cls = upb_classes()
    pz_simple, pz_nested, pz_bytes = protozero_writers()
    upb_simple, upb_nested = upb_writers(cls)
    sol_simple, sol_nested = speed_of_light_writers()

    pz_simple()
    if cls.FromString(pz_bytes()) != cls.FromString(upb_simple()):
        sys.exit("protozero and protobuf disagree on the Simple message")
    pz_nested()
    if cls.FromString(pz_bytes()) != cls.FromString(upb_nested()):
        sys.exit("protozero and protobuf disagree on the Nested message")

    compiled = not protozero._message.__file__.endswith(".py")
    mode = "compiled (mypyc)" if compiled else "pure Python"
    print(f"protozero benchmark: {mode}, {args.iterations} iterations, median of {args.repeats}")
    print(f"{'case':8} {'protozero':>11} {'upb':>9} {'struct':>9} {'pz/upb':>8} {'target':>7}")
    for name, pz, upb, sol in (
        ("Simple", pz_simple, upb_simple, sol_simple),
        ("Nested", pz_nested, upb_nested, sol_nested),
    ):
        t_pz = measure(pz, args.iterations, args.repeats)
        t_upb = measure(upb, args.iterations, args.repeats)
        t_sol = measure(sol, args.iterations, args.repeats)
        target = TARGETS[name][1 if compiled else 0]
        ratio = t_pz / t_upb
        verdict = "ok" if ratio <= target else "MISSED"
        print(
            f"{name:8} {t_pz:8.0f} ns {t_upb:6.0f} ns {t_sol:6.0f} ns {ratio:7.2f}x "
            f"{target:6.1f}x {verdict}  (protozero/struct {t_pz / t_sol:.1f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
