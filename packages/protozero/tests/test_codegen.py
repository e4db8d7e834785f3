"""The code generator: generated writers produce what protobuf expects; output is clean."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protozero import (
    HeapBuffered,
    Message,
    ProtozeroError,
    ScatteredStreamWriter,
    encode_varint,
)
from protozero._proto_utils import SHORT_VARINTS, VARINT_PAIRS
from protozero.codegen import DescriptorError, generate, main, parse_descriptor_set
from protozero.codegen._descriptors import (
    TYPE_GROUP,
    TYPE_INT32,
    FieldDesc,
    FileDesc,
    MessageDesc,
)

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def test_generated_writers_parse_with_protobuf(pb: dict[str, Any], pbzero: ModuleType) -> None:
    hb = HeapBuffered(pbzero.EveryField)
    m = hb.msg
    m.set_field_int32(-7)
    m.set_field_int64(1 << 40)
    m.set_field_uint32(0xFFFF_FFFF)
    m.set_field_uint64(1 << 63)
    m.set_field_sint32(-3)
    m.set_field_sint64(-(1 << 62))
    m.set_field_fixed32(5)
    m.set_field_fixed64(6)
    m.set_field_sfixed32(-8)
    m.set_field_sfixed64(-9)
    m.set_field_float(0.25)
    m.set_field_double(-1.5)
    m.set_field_bool(True)
    child = m.add_field_nested()
    child.set_field_string("child")
    child.add_field_nested().set_small_enum(pbzero.TO_BE)
    m.set_small_enum(pbzero.SmallEnum.TO_BE)
    m.set_nested_enum(pbzero.EveryField.PONG)
    m.set_color(2)
    point = m.begin_point()
    point.set_x(-4)
    point.set_color(1)
    inner = m.begin_inner()
    inner.set_value(11)
    inner.add_names("a")
    inner.add_names(b"b")
    m.set_choice_name("picked")
    m.set_field_string("héllo")
    m.set_field_bytes(memoryview(b"\x00\x01"))
    m.add_repeated_string("x")
    m.add_repeated_fixed64(12)
    m.add_repeated_sfixed32(-13)
    m.add_repeated_int32(14)
    m.set_packed_int32_packed([1, -1])
    m.set_packed_sint64_packed([-2])
    m.set_packed_fixed32_packed([3])
    m.set_packed_double_packed([4.5])
    m.set_packed_float_packed([5.5])
    m.set_packed_sfixed64_packed([-6])
    m.set_max_id(99)
    parsed = pb["pztest.EveryField"].FromString(hb.serialize())
    expected = pb["pztest.EveryField"](
        field_int32=-7,
        field_int64=1 << 40,
        field_uint32=0xFFFF_FFFF,
        field_uint64=1 << 63,
        field_sint32=-3,
        field_sint64=-(1 << 62),
        field_fixed32=5,
        field_fixed64=6,
        field_sfixed32=-8,
        field_sfixed64=-9,
        field_float=0.25,
        field_double=-1.5,
        field_bool=True,
        small_enum=1,
        nested_enum=2,
        color=2,
        point={"x": -4, "color": 1},
        inner={"value": 11, "names": ["a", "b"]},
        choice_name="picked",
        field_string="héllo",
        field_bytes=b"\x00\x01",
        repeated_string=["x"],
        repeated_fixed64=[12],
        repeated_sfixed32=[-13],
        repeated_int32=[14],
        packed_int32=[1, -1],
        packed_sint64=[-2],
        packed_fixed32=[3],
        packed_double=[4.5],
        packed_float=[5.5],
        packed_sfixed64=[-6],
        max_id=99,
    )
    expected.field_nested.add(field_string="child").field_nested.add(small_enum=1)
    assert parsed == expected


def test_constants_and_types(pbzero: ModuleType, generated: Path) -> None:
    assert pbzero.EveryField.FIELD_FIELD_NESTED == 14
    assert pbzero.EveryField.FIELD_MAX_ID == 536870911
    assert pbzero.EveryField.NestedEnum.PONG == 2
    assert pbzero.EveryField.PING == 1
    assert pbzero.SmallEnum.NOT_TO_BE == 0
    assert pbzero.NOT_TO_BE == 0
    assert issubclass(pbzero.EveryField.Inner, pbzero.Message)
    other = sys.modules["pzgen.pztest_other_pbzero"]
    assert other.GREEN == 2
    hb = HeapBuffered(pbzero.EveryField)
    assert isinstance(hb.msg.begin_point(), other.Point)
    assert isinstance(hb.msg.add_field_nested(), pbzero.EveryField)
    text = (generated / "pzgen" / "pztest_pbzero.py").read_text()
    assert 'data = b"\\xa2\\x1f" + _VARINTS[n] + data' in text
    assert "self.put_bytes(0x1FA2, data)" in text
    assert "from pzgen import pztest_other_pbzero as _pztest_other_pbzero" in text


def test_generation_is_deterministic(descriptor_set_path: Path, generated: Path) -> None:
    files = parse_descriptor_set(descriptor_set_path.read_bytes())
    again = generate(files, "", "pzgen", ["pztest.*"])
    assert sorted(again) == ["pztest_other_pbzero.py", "pztest_pbzero.pxd", "pztest_pbzero.py"]
    for rel, text in again.items():
        assert (generated / "pzgen" / rel).read_text() == text


def test_a_compiled_module_declares_every_message_class_in_its_pxd(generated: Path) -> None:
    pxd = (generated / "pzgen" / "pztest_pbzero.pxd").read_text()
    text = (generated / "pzgen" / "pztest_pbzero.py").read_text()
    classes = [line for line in pxd.splitlines() if line.startswith("cdef class")]
    assert "cdef class EveryField(Message):" in classes
    assert "cdef class EveryField_Inner(Message):" in classes  # nested: at module level
    assert len(classes) == text.count("(Message):\n")
    assert "from protozero._message cimport Message" in pxd
    assert "    Inner = EveryField_Inner" in text
    assert "def begin_inner(self) -> EveryField_Inner:" in text
    assert "if cython.compiled or _COMPILED:" in text
    other = (generated / "pzgen" / "pztest_other_pbzero.py").read_text()
    assert "cython" not in other  # not selected: no compiled form
    assert not (generated / "pzgen" / "pztest_other_pbzero.pxd").exists()


def test_strip_prefix_selects_and_renames(descriptor_set_path: Path) -> None:
    files = parse_descriptor_set(descriptor_set_path.read_bytes())
    assert sorted(generate(files, "pztest_", "pkg")) == ["other_pbzero.py"]


def test_generated_code_is_lint_format_and_type_clean(generated: Path, tmp_path: Path) -> None:
    if not (BIN / "ruff").exists() or not (BIN / "mypy").exists():
        pytest.skip("ruff and mypy are not installed next to this interpreter")
    pkg = generated / "pzgen"
    config = str(ROOT / "pyproject.toml")
    lint = [str(BIN / "ruff"), "check", "--no-cache", "--config", config, str(pkg)]
    subprocess.run(lint, check=True, timeout=120)
    fmt = [str(BIN / "ruff"), "format", "--check", "--no-cache", "--config", config, str(pkg)]
    subprocess.run(fmt, check=True, timeout=120)
    subprocess.run(
        [str(BIN / "mypy"), "--strict", "--no-incremental", "--config-file", config, "-p", "pzgen"],
        check=True,
        timeout=300,
        cwd=generated,
        env={"MYPYPATH": str(generated), "PATH": str(BIN)},
    )


def test_groups_are_refused() -> None:
    group = FieldDesc("g", 1, 1, TYPE_GROUP, ".M.G", None)
    files = [FileDesc(name="g.proto", messages=[MessageDesc("M", fields=[group])])]
    with pytest.raises(DescriptorError, match="unsupported type"):
        generate(files, "", "")


def test_clashing_names_are_refused() -> None:
    fields = [FieldDesc("reset", 1, 1, TYPE_INT32, "", None)]
    clash = FileDesc(name="c.proto", messages=[MessageDesc("M", fields=fields)])
    assert "def set_reset(self, value: int)" in generate([clash], "", "")["c_pbzero.py"]
    bad = FileDesc(name="b.proto", messages=[MessageDesc("M", messages=[MessageDesc("reset")])])
    with pytest.raises(DescriptorError, match="ambiguous"):
        generate([bad], "", "")


def test_cli_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.pb"), str(tmp_path / "out")]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\x0a\x05\x0a\x10")
    assert main([str(bad), str(tmp_path / "out")]) == 1
    assert "malformed" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_generated_module_has_no_protobuf_dependency(generated: Path) -> None:
    script = (
        "import sys; sys.modules['google'] = None; sys.modules['google.protobuf'] = None\n"
        "from pzgen.pztest_pbzero import EveryField\n"
        "from protozero import HeapBuffered, ProtoDecoder\n"
        "hb = HeapBuffered(EveryField); hb.msg.set_field_int32(3)\n"
        "print([f.as_int32() for f in ProtoDecoder(hb.serialize())])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(generated)},
    )
    assert out.stdout.strip() == "[3]"


def test_benchmark_writers_are_up_to_date(tmp_path: Path) -> None:
    bench = ROOT / "packages" / "protozero" / "benchmarks"
    descriptors = tmp_path / "bench.pb"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{bench}",
            f"--descriptor_set_out={descriptors}",
            str(bench / "bench_messages.proto"),
        ],
        check=True,
        timeout=120,
    )
    fresh = generate(parse_descriptor_set(descriptors.read_bytes()), "", "", ["*"])
    names = ["bench_messages_pbzero.py", "bench_messages_pbzero.pxd"]
    assert fresh == {name: (bench / name).read_text() for name in names}


@pytest.mark.parametrize("parent_write", ["varint", "string", "begin", "set_fields"])
def test_generated_parent_write_finalizes_open_children(
    pbzero: ModuleType, pb: dict[str, Any], parent_write: str
) -> None:
    hb = HeapBuffered(pbzero.EveryField)
    root = hb.msg
    root.set_field_int32(5)  # the writer now has a range: the starters below take fast paths
    child = root.add_field_nested()
    child.set_field_int64(300)
    grandchild = child.add_field_nested()
    grandchild.set_field_string("deep")
    assert (root.nested_message, child.nested_message) == (child, grandchild)
    if parent_write == "varint":
        root.set_field_int64(1 << 40)
    elif parent_write == "set_fields":
        root.set_fields(field_int64=1 << 40, field_double=0.5)
    elif parent_write == "string":
        root.set_field_string("parent")
    else:
        root.add_field_nested().set_field_int64(7)
    assert child.is_finalized
    assert grandchild.is_finalized
    for stale in (child, grandchild):
        with pytest.raises(ProtozeroError, match="finalized"):
            stale.set_field_int64(1)
        with pytest.raises(ProtozeroError, match="finalized"):
            stale.set_field_string("late")
        with pytest.raises(ProtozeroError, match="finalized"):
            stale.add_field_nested()
    parsed = pb["pztest.EveryField"].FromString(hb.serialize())
    assert parsed.field_int32 == 5
    assert parsed.field_nested[0].field_int64 == 300
    assert parsed.field_nested[0].field_nested[0].field_string == "deep"
    if parent_write == "varint":
        assert parsed.field_int64 == 1 << 40
    elif parent_write == "set_fields":
        assert (parsed.field_int64, parsed.field_double) == (1 << 40, 0.5)
    elif parent_write == "string":
        assert parsed.field_string == "parent"
    else:
        assert [n.field_int64 for n in parsed.field_nested] == [300, 7]


def test_varint_tables_hold_varint_encodings() -> None:
    for value in range(1 << 14):
        assert SHORT_VARINTS[value] == encode_varint(value)
        assert VARINT_PAIRS[value] == encode_varint(value | 1 << 14)[:2]


# Where a varint grows by a byte, and where the generated setters switch encoders.
_LENGTH_EDGES = sorted(
    {e for k in range(7, 64, 7) for e in ((1 << k) - 1, 1 << k)} | {(1 << 64) - 1}
)


@settings(max_examples=200, deadline=None)
@given(
    value=st.one_of(st.sampled_from(_LENGTH_EDGES), st.integers(0, (1 << 64) - 1)),
    fields=st.tuples(st.integers(-(1 << 31), (1 << 31) - 1), st.text(max_size=200)),
    compiled=st.booleans(),
)
def test_generated_setters_match_protobuf(
    pbzero: ModuleType,
    pb: dict[str, Any],
    value: int,
    fields: tuple[int, str],
    compiled: bool,
) -> None:
    """Varints of every length and short strings, through both varint fast paths."""
    signed, text = fields
    original = pbzero._COMPILED
    setattr(pbzero, "_COMPILED", compiled)  # noqa: B010 - module attribute, not typed
    try:
        hb = HeapBuffered(pbzero.EveryField)
        hb.msg.set_field_uint64(value)
        hb.msg.set_field_sint64(value - (1 << 63))
        hb.msg.set_field_string(text)
        hb.msg.set_max_id(signed)  # a 5-byte tag
        ours = hb.serialize()
    finally:
        setattr(pbzero, "_COMPILED", original)  # noqa: B010 - module attribute, not typed
    expected = pb["pztest.EveryField"](
        field_uint64=value, field_sint64=value - (1 << 63), max_id=signed, field_string=text
    )
    assert ours == expected.SerializeToString()


# (generated setter, equivalent Message.append_* call, field id, values)
_VARINTS = st.one_of(
    st.integers(-(1 << 63), (1 << 64) - 1),
    st.sampled_from([0, -1, *_LENGTH_EDGES]),
)
_OPS: list[tuple[str, Callable[[Message, int, Any], None], int, st.SearchStrategy[Any]]] = [
    ("set_field_int64", Message.append_int, 2, _VARINTS),
    ("set_field_uint64", Message.append_varint, 4, _VARINTS),
    ("set_field_sint64", Message.append_zigzag, 6, st.integers(-(1 << 63), (1 << 63) - 1)),
    ("set_field_string", Message.append_string, 500, st.text(max_size=140)),
    ("set_field_bytes", Message.append_bytes, 505, st.binary(max_size=140)),
    ("add_repeated_int32", Message.append_int, 999, st.integers(-(1 << 31), (1 << 31) - 1)),
    ("set_max_id", Message.append_int, 536870911, st.integers(-(1 << 31), (1 << 31) - 1)),
]
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.integers(0, len(_OPS) - 1), st.data()),
        st.sampled_from(["begin", "end"]),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_STEPS, sizes=st.lists(st.integers(6, 64), min_size=1, max_size=6))
def test_generated_fast_paths_match_generic_writes_across_tiny_buffers(
    pbzero: ModuleType, pb: dict[str, Any], steps: list[Any], sizes: list[int]
) -> None:
    values: dict[int, Any] = {}
    expected = b""
    original = pbzero._COMPILED
    try:
        # Both fast paths: stores from the generated code (interpreted) and one call (compiled).
        for compiled in (False, True):
            setattr(pbzero, "_COMPILED", compiled)  # noqa: B010 - module attribute, not typed
            ours, expected = _write_both_ways(pbzero, steps, sizes, values)
            assert ours == expected
    finally:
        setattr(pbzero, "_COMPILED", original)  # noqa: B010 - module attribute, not typed
    assert pb["pztest.EveryField"].FromString(expected) == pb["pztest.EveryField"].FromString(
        _write_generic_in_one_buffer(steps, values)
    )


def _write_generic_in_one_buffer(steps: list[Any], values: dict[int, Any]) -> bytes:
    """`steps` written with append_* into one heap buffer (every small message compacted)."""
    reference = HeapBuffered(Message, initial_slice_size=1 << 16)
    stack = [reference.msg]
    for position, step in enumerate(steps):
        if step == "begin":
            stack.append(stack[-1].begin_nested_message(14, Message))
        elif step == "end":
            if len(stack) > 1:
                stack.pop().finalize()
        else:
            _, append, field_id, _ = _OPS[step[0]]
            append(stack[-1], field_id, values[position])
    return reference.serialize()


def _write_both_ways(
    pbzero: ModuleType, steps: list[Any], sizes: list[int], values: dict[int, Any]
) -> tuple[bytes, bytes]:
    """Writes `steps` with generated setters and with append_* over the same tiny ranges."""
    scattered = _SizesDelegate(sizes)
    writer = ScatteredStreamWriter(scattered)
    scattered.writer = writer
    ours = pbzero.EveryField()
    ours.reset(writer)
    reference_ranges = _SizesDelegate(sizes)
    reference_writer = ScatteredStreamWriter(reference_ranges)
    reference_ranges.writer = reference_writer
    reference = Message()
    reference.reset(reference_writer)
    stack: list[tuple[Any, Message]] = [(ours, reference)]
    for position, step in enumerate(steps):
        if step == "begin":
            gen, ref = stack[-1]
            stack.append((gen.add_field_nested(), ref.begin_nested_message(14, Message)))
        elif step == "end":
            if len(stack) > 1:
                gen, ref = stack.pop()
                assert gen.finalize() == ref.finalize()
        else:
            index, data = step
            name, append, field_id, strategy = _OPS[index]
            if position not in values:
                values[position] = data.draw(strategy)
            gen, ref = stack[-1]
            getattr(gen, name)(values[position])
            append(ref, field_id, values[position])
    ours.finalize()
    reference.finalize()
    return scattered.stitch(), reference_ranges.stitch()


class _SizesDelegate:
    """Ranges of the given sizes (cycling), each padded inside a larger buffer."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.ranges: list[tuple[memoryview, int, int]] = []
        self.writer: ScatteredStreamWriter | None = None

    def _close(self) -> None:
        if self.ranges and self.writer is not None:
            buf, begin, _ = self.ranges[-1]
            self.ranges[-1] = (buf, begin, self.writer.write_ptr)

    def get_new_buffer(self) -> tuple[memoryview, int, int]:
        self._close()
        size = self.sizes[len(self.ranges) % len(self.sizes)]
        buf = memoryview(bytearray(b"\xa5" * (size + 4)))
        self.ranges.append((buf, 2, 2 + size))
        return buf, 2, 2 + size

    def stitch(self) -> bytes:
        self._close()
        return b"".join(bytes(b[s:e]) for b, s, e in self.ranges)


_SCALAR_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "field_int32": st.integers(-(1 << 31), (1 << 31) - 1),
        "field_int64": st.integers(-(1 << 63), (1 << 63) - 1),
        "field_uint32": st.integers(0, (1 << 32) - 1),
        "field_uint64": st.integers(0, (1 << 64) - 1),
        "field_sint32": st.integers(-(1 << 31), (1 << 31) - 1),
        "field_sint64": st.integers(-(1 << 63), (1 << 63) - 1),
        "field_fixed32": st.integers(0, (1 << 32) - 1),
        "field_fixed64": st.integers(0, (1 << 64) - 1),
        "field_sfixed32": st.integers(-(1 << 31), (1 << 31) - 1),
        "field_sfixed64": st.integers(-(1 << 63), (1 << 63) - 1),
        "field_float": st.sampled_from([0.0, -1.5, 0.25, 3e38]),
        "field_double": st.floats(allow_nan=False),
        "field_bool": st.booleans(),
        "small_enum": st.sampled_from([0, 1]),
        "nested_enum": st.sampled_from([1, 2]),
        "field_string": st.text(max_size=140),
        "field_bytes": st.binary(max_size=140),
    },
)


@settings(max_examples=150, deadline=None)
@given(values=_SCALAR_FIELDS, size=st.sampled_from([6, 16, 4096]), compiled=st.booleans())
def test_set_fields_writes_what_protobuf_and_the_setters_write(
    pbzero: ModuleType,
    pb: dict[str, Any],
    values: dict[str, Any],
    size: int,
    compiled: bool,
) -> None:
    """One call for several fields: protobuf's bytes (field-number order), the setters' bytes."""
    original = pbzero._COMPILED
    setattr(pbzero, "_COMPILED", compiled)  # noqa: B010 - module attribute, not typed
    try:
        once = HeapBuffered(pbzero.EveryField, initial_slice_size=size, maximum_slice_size=size)
        once.msg.set_fields(**values)
        each = HeapBuffered(pbzero.EveryField, initial_slice_size=size, maximum_slice_size=size)
        fields = pb["pztest.EveryField"].DESCRIPTOR.fields_by_name
        for name in sorted(values, key=lambda name: fields[name].number):
            getattr(each.msg, f"set_{name}")(values[name])
    finally:
        setattr(pbzero, "_COMPILED", original)  # noqa: B010 - module attribute, not typed
    ours = once.serialize()
    assert ours == each.serialize()
    assert ours == pb["pztest.EveryField"](**values).SerializeToString()


class _CountingBuffer(bytearray):
    """A buffer that counts the stores made into it from Python."""

    stores = 0

    def __setitem__(self, key: Any, value: Any) -> None:
        self.stores += 1
        super().__setitem__(key, value)


class _OneBuffer:
    def __init__(self, buffer: bytearray) -> None:
        self.buffer = buffer

    def get_new_buffer(self) -> tuple[bytearray, int, int]:
        return self.buffer, 0, len(self.buffer)


def test_pure_set_fields_stores_all_its_fields_with_one_store(
    pbzero: ModuleType, pb: dict[str, Any]
) -> None:
    """The interpreted `set_fields` encodes the fields it is given, then stores them at once."""
    buffer = _CountingBuffer(256)
    writer = ScatteredStreamWriter(_OneBuffer(buffer))
    writer.reset(buffer, 0, len(buffer))
    msg = pbzero.EveryField()
    msg.reset(writer)
    values = {
        "field_int32": -1,
        "field_uint64": 1 << 40,
        "field_sint32": -3,
        "field_fixed32": 7,
        "field_double": 0.5,
        "field_bool": True,
        "field_string": "é" * 70,
        "field_bytes": b"\x00\x01",
    }
    original = pbzero._COMPILED
    setattr(pbzero, "_COMPILED", False)  # noqa: B010 - module attribute, not typed
    try:
        msg.set_fields(**values)
    finally:
        setattr(pbzero, "_COMPILED", original)  # noqa: B010 - module attribute, not typed
    assert buffer.stores == 1
    size = msg.finalize()
    assert bytes(buffer[:size]) == pb["pztest.EveryField"](**values).SerializeToString()


def test_set_fields_is_only_in_compiled_modules(pbzero: ModuleType) -> None:
    assert hasattr(pbzero.EveryField, "set_fields")
    other = sys.modules["pzgen.pztest_other_pbzero"]
    assert not hasattr(other.Point, "set_fields")
