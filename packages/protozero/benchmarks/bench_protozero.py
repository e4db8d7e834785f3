"""ProtoZero's benchmark: Simple, Nested, Wide messages, protozero vs protobuf (upb) vs struct.

Simple = int32, uint32, int64, uint64 and a 32-byte string (the values of upstream's
protozero_benchmark.cc); Nested = Simple plus a child filled the same way, 3 levels deep;
Wide = ten scalars (int32, uint32, int64, uint64, sint32, sint64, fixed32, fixed64, double,
bool) and three repeated children filled like Simple.
protozero writes into one reused buffer through a ScatteredStreamWriter, the way a TraceWriter
does; protobuf builds a new message, sets the fields and calls SerializeToString(); the
speed-of-light writer is one `struct.pack_into` per level; the floor row makes one method call
and one slice store of the field's final bytes per field, the least any writer that stores each
field as it is set can cost (encoding for free); `protozero set_fields` sets the five fields
of a message with one call of the generated `set_fields`. The runs are interleaved and timed
in process CPU time (the machine is shared); each prints the median ns/op and the ratios.

The run measures the build that loads (compiled where the `.so` files are built), then runs
itself again with PERFETTO_PY_PURE=1 and prints both (`--this-build-only` skips the second).
The compiled run compiles the generated writers (`bench_messages_pbzero.py` with its `.pxd`)
into build/bench/ first, as perfetto-protos compiles its hot writers.

    python benchmarks/bench_protozero.py [--iterations N] [--repeats R]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import protozero
from perfetto_testing import report_row
from protozero import ScatteredStreamWriter, WritableBuffer

HERE = Path(__file__).resolve().parent
BUFFER_SIZE = 64 * 1024
COMPILED_MESSAGES = HERE.parent / "build" / "bench"


def compile_messages() -> None:
    """Builds `bench_messages_pbzero` in COMPILED_MESSAGES (once per change of its inputs) and
    imports it from there: its `.pxd` makes its classes compiled subclasses of `Message`."""
    backend = HERE.parents[2] / "tools" / "perfetto-build" / "perfetto_build.py"
    build = importlib.util.spec_from_file_location("perfetto_build", backend)
    assert build is not None
    assert build.loader is not None
    script = importlib.util.module_from_spec(build)
    build.loader.exec_module(script)
    sources = [HERE / "bench_messages_pbzero.py", HERE / "bench_messages_pbzero.pxd"]
    inputs = [*sources, HERE.parent / "src" / "protozero" / "_message.pxd"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = COMPILED_MESSAGES / f"bench_messages_pbzero{suffix}"
    if not built.is_file() or built.stat().st_mtime < max(p.stat().st_mtime for p in inputs):
        COMPILED_MESSAGES.mkdir(parents=True, exist_ok=True)
        for source in sources:
            shutil.copy(source, COMPILED_MESSAGES)
        directives = [f"--directive={k}={v}" for k, v in script.DIRECTIVES.items()]
        command = [sys.executable, "-m", "Cython.Build.Cythonize", "-i", "-q", *directives]
        command.append(sources[0].name)
        env = {**os.environ, "CFLAGS": " ".join(script.CFLAGS)}
        subprocess.run(command, cwd=COMPILED_MESSAGES, env=env, check=True, timeout=600)
    sys.path.insert(0, str(COMPILED_MESSAGES))


if protozero.COMPILED:
    compile_messages()

from bench_fill import (  # noqa: E402
    BOOL,
    DOUBLE,
    FIXED32,
    FIXED64,
    INT32,
    INT64,
    SINT32,
    SINT64,
    STRING,
    UINT32,
    UINT64,
    FieldStoreFloor,
)
from bench_messages_pbzero import EveryField  # noqa: E402

# name -> (pure-Python target, compiled target) as a ratio to protobuf upb.
TARGETS = {"Simple": (2.0, 0.30), "Nested": (2.0, 0.35), "Wide": (2.0, 0.35)}
CASES = tuple(TARGETS)


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


Writers = tuple[
    Callable[[], object], Callable[[], object], Callable[[], object], Callable[[], bytes]
]


def protozero_writers(*, one_call: bool = False) -> Writers:
    """Simple, Nested and Wide written by interpreted code, and the bytes of the last message:
    with one setter call per field, or with `one_call` one `set_fields` call per message."""
    delegate = ReusedBuffer()
    writer = ScatteredStreamWriter(delegate)
    buf = delegate.buffer
    msg = EveryField()

    def fill_each(m: EveryField) -> None:
        m.set_field_int32(INT32)
        m.set_field_uint32(UINT32)
        m.set_field_int64(INT64)
        m.set_field_uint64(UINT64)
        m.set_field_string(STRING)

    def fill_once(m: EveryField) -> None:
        m.set_fields(
            field_int32=INT32,
            field_uint32=UINT32,
            field_int64=INT64,
            field_uint64=UINT64,
            field_string=STRING,
        )

    def fill_wide_each(m: EveryField) -> None:
        m.set_field_int32(INT32)
        m.set_field_uint32(UINT32)
        m.set_field_int64(INT64)
        m.set_field_uint64(UINT64)
        m.set_field_sint32(SINT32)
        m.set_field_sint64(SINT64)
        m.set_field_fixed32(FIXED32)
        m.set_field_fixed64(FIXED64)
        m.set_field_double(DOUBLE)
        m.set_field_bool(BOOL)

    def fill_wide_once(m: EveryField) -> None:
        m.set_fields(
            field_int32=INT32,
            field_uint32=UINT32,
            field_int64=INT64,
            field_uint64=UINT64,
            field_sint32=SINT32,
            field_sint64=SINT64,
            field_fixed32=FIXED32,
            field_fixed64=FIXED64,
            field_double=DOUBLE,
            field_bool=BOOL,
        )

    fill_simple = fill_once if one_call else fill_each
    fill_scalars = fill_wide_once if one_call else fill_wide_each

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

    def wide() -> None:
        writer.reset(buf, 0, BUFFER_SIZE)
        msg.reset(writer)
        fill_scalars(msg)
        fill_simple(msg.add_field_nested())
        fill_simple(msg.add_field_nested())
        fill_simple(msg.add_field_nested())
        msg.finalize()

    def last_bytes() -> bytes:
        return bytes(buf[: msg.finalize()])

    return simple, nested, wide, last_bytes


def upb_writers(cls: Any) -> tuple[Callable[[], bytes], Callable[[], bytes], Callable[[], bytes]]:
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

    def wide() -> bytes:
        m = cls()
        m.field_int32 = INT32
        m.field_uint32 = UINT32
        m.field_int64 = INT64
        m.field_uint64 = UINT64
        m.field_sint32 = SINT32
        m.field_sint64 = SINT64
        m.field_fixed32 = FIXED32
        m.field_fixed64 = FIXED64
        m.field_double = DOUBLE
        m.field_bool = BOOL
        fill_simple(m.field_nested.add())
        fill_simple(m.field_nested.add())
        fill_simple(m.field_nested.add())
        return bytes(m.SerializeToString())

    return simple, nested, wide


def floor_writers(cls: Any) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    """One method call and one slice store of the field's final bytes per field (and per child).

    The floor of a writer that, like protozero, stores each field as it is set: what remains
    when encoding costs nothing.
    """
    floor = FieldStoreFloor(memoryview(bytearray(BUFFER_SIZE)))
    store = floor.store
    m = cls(field_int32=INT32, field_uint32=UINT32, field_int64=INT64, field_uint64=UINT64)
    m.field_string = STRING
    f_int32, f_int64, f_uint32, f_uint64, f_string = (
        bytes(cls(**{name: getattr(m, name)}).SerializeToString())
        for name in ("field_int32", "field_int64", "field_uint32", "field_uint64", "field_string")
    )
    wide_values = {
        "field_sint32": SINT32,
        "field_sint64": SINT64,
        "field_fixed32": FIXED32,
        "field_fixed64": FIXED64,
        "field_double": DOUBLE,
        "field_bool": BOOL,
    }
    f_sint32, f_sint64, f_fixed32, f_fixed64, f_double, f_bool = (
        bytes(cls(**{name: value}).SerializeToString()) for name, value in wide_values.items()
    )
    child = b"\x72\x80\x80\x80\x00"

    def simple() -> None:
        store(0, f_int32)
        store(6, f_uint32)
        store(12, f_int64)
        store(18, f_uint64)
        store(24, f_string)

    def nested() -> None:
        p = 0
        for _ in range(3):
            store(p, f_int32)
            store(p + 6, f_uint32)
            store(p + 12, f_int64)
            store(p + 18, f_uint64)
            store(p + 24, f_string)
            store(p + 59, child)
            p += 64
        store(p, f_int32)
        store(p + 6, f_uint32)
        store(p + 12, f_int64)
        store(p + 18, f_uint64)
        store(p + 24, f_string)

    def wide() -> None:
        store(0, f_int32)
        store(6, f_uint32)
        store(12, f_int64)
        store(18, f_uint64)
        store(24, f_sint32)
        store(28, f_sint64)
        store(34, f_fixed32)
        store(39, f_fixed64)
        store(48, f_double)
        store(57, f_bool)
        p = 59
        for _ in range(3):
            store(p, child)
            store(p + 5, f_int32)
            store(p + 11, f_uint32)
            store(p + 17, f_int64)
            store(p + 23, f_uint64)
            store(p + 29, f_string)
            p += 64

    return simple, nested, wide


def speed_of_light_writers() -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    layout = struct.Struct("<iIqQ32s")
    pack = layout.pack_into
    pack_scalars = struct.Struct("<iIqQiqIQd?").pack_into
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

    def wide() -> None:
        pack_scalars(
            buf, 0, INT32, UINT32, INT64, UINT64, SINT32, SINT64, FIXED32, FIXED64, DOUBLE, BOOL
        )
        pack(buf, 64, INT32, UINT32, INT64, UINT64, text)
        pack(buf, 64 + size, INT32, UINT32, INT64, UINT64, text)
        pack(buf, 64 + 2 * size, INT32, UINT32, INT64, UINT64, text)

    return simple, nested, wide


def measure(fns: list[Callable[[], object]], iterations: int, repeats: int) -> list[float]:
    """Median ns per call of each function, from `repeats` interleaved loops of `iterations`."""
    samples: list[list[float]] = [[] for _ in fns]
    loop = range(iterations)
    for _ in range(repeats):
        for fn, out in zip(fns, samples, strict=True):
            start = time.process_time_ns()
            for _ in loop:
                fn()
            out.append((time.process_time_ns() - start) / iterations)
    return [statistics.median(s) for s in samples]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--this-build-only", action="store_true")
    args = parser.parse_args()
    if protozero.COMPILED and not args.this_build_only:
        pure = {**os.environ, "PERFETTO_PY_PURE": "1"}
        argv = [sys.executable, *sys.argv, "--this-build-only"]
        subprocess.run(argv, env=pure, check=True)

    cls = upb_classes()
    upbs = upb_writers(cls)
    sols = speed_of_light_writers()
    floors = floor_writers(cls)
    variants = [
        ("protozero", protozero_writers()),
        ("protozero set_fields", protozero_writers(one_call=True)),
    ]
    compiled = protozero.COMPILED

    for label, (*writers, last_bytes) in variants:
        for name, pz, upb in zip(CASES, writers, upbs, strict=True):
            pz()
            if cls.FromString(last_bytes()) != cls.FromString(upb()):
                sys.exit(f"{label} and protobuf disagree on the {name} message")

    mode = "compiled (Cython)" if compiled else "pure Python"
    print(f"protozero benchmark: {mode}, {args.iterations} iterations, median of {args.repeats}")
    print(f"{'case':7} {'writer':20} {'ns/op':>8} {'/upb':>7} {'/struct':>8} {'target':>7}")
    for index, name in enumerate(CASES):
        upb, sol, floor = upbs[index], sols[index], floors[index]
        writers = [v[1][index] for v in variants]
        *t_pz, t_upb, t_sol, t_floor = measure(
            [*writers, upb, sol, floor], args.iterations, args.repeats
        )
        target = TARGETS[name][1 if compiled else 0]
        print(f"{name:7} {'protobuf upb':20} {t_upb:8.0f}")
        print(f"{name:7} {'struct.pack_into':20} {t_sol:8.0f}")
        print(f"{name:7} {'floor: call+store':20} {t_floor:8.0f} {t_floor / t_upb:6.2f}x")
        for (label, _), t in zip(variants, t_pz, strict=True):
            verdict = "ok" if t / t_upb <= target else "MISSED"
            print(
                f"{name:7} {label:20} {t:8.0f} {t / t_upb:6.2f}x {t / t_sol:7.1f}x "
                f"{target:6.2f}x {verdict}"
            )
        if name == "Wide" and compiled:
            report_row(
                "protozero_message",
                measured=t_pz[0],
                reference=t_upb,
                cost_ratio=t_pz[0] / t_upb,
                unit="ns per message",
                reference_name="protobuf's upb",
                floor=f"struct.pack_into of the same bytes {t_sol:.0f} ns",
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
