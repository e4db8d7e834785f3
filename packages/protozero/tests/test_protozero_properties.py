"""Property tests: protozero and protobuf (upb) agree on random messages, both directions."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from protozero import Field, HeapBuffered, Message, ProtoDecoder, ScatteredStreamWriter

I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
U32 = st.integers(0, (1 << 32) - 1)
U64 = st.integers(0, (1 << 64) - 1)
F32 = st.floats(width=32, allow_nan=False)
F64 = st.floats(allow_nan=False)


def _f32(f: Field) -> float:
    return f.as_float()


def _bytes(f: Field) -> bytes:
    return bytes(f.as_bytes())


Writer = Callable[[Message, int, Any], None]
Reader = Callable[[Field], Any]


# name -> (field id, strategy, writer, reader of one value from a decoded field)
SCALARS: dict[str, tuple[int, Any, Writer, Reader]] = {
    "field_int32": (1, I32, Message.append_int, Field.as_int32),
    "field_int64": (2, I64, Message.append_int, Field.as_int64),
    "field_uint32": (3, U32, Message.append_varint, Field.as_uint32),
    "field_uint64": (4, U64, Message.append_varint, Field.as_uint64),
    "field_sint32": (5, I32, Message.append_zigzag, Field.as_sint32),
    "field_sint64": (6, I64, Message.append_zigzag, Field.as_sint64),
    "field_fixed32": (7, U32, Message.append_fixed32, Field.as_fixed32),
    "field_fixed64": (8, U64, Message.append_fixed64, Field.as_fixed64),
    "field_sfixed32": (9, I32, Message.append_sfixed32, Field.as_int32),
    "field_sfixed64": (10, I64, Message.append_sfixed64, Field.as_int64),
    "field_float": (11, F32, Message.append_float, _f32),
    "field_double": (12, F64, Message.append_double, Field.as_double),
    "field_bool": (13, st.booleans(), Message.append_bool, Field.as_bool),
    "small_enum": (51, st.sampled_from([0, 1]), Message.append_varint, Field.as_int32),
    "field_string": (500, st.text(max_size=40), Message.append_string, Field.as_string),
    "field_bytes": (
        505,
        st.binary(max_size=300),
        Message.append_bytes,
        _bytes,
    ),
}
REPEATED: dict[str, tuple[int, Any, Writer, Reader]] = {
    "repeated_string": (700, st.text(max_size=8), Message.append_string, Field.as_string),
    "repeated_fixed64": (701, U64, Message.append_fixed64, Field.as_fixed64),
    "repeated_sfixed32": (702, I32, Message.append_sfixed32, Field.as_int32),
    "repeated_int32": (999, I32, Message.append_int, Field.as_int32),
}
PACKED: dict[str, tuple[int, Any, Writer]] = {
    "packed_int32": (1000, I32, Message.append_packed_varints),
    "packed_sint64": (1001, I64, Message.append_packed_zigzag),
    "packed_fixed32": (1002, U32, Message.append_packed_fixed32),
    "packed_double": (1003, F64, Message.append_packed_double),
    "packed_float": (1004, F32, Message.append_packed_float),
    "packed_sfixed64": (1005, I64, Message.append_packed_fixed64),
}

Spec = dict[str, Any]


def _spec_strategy(children: st.SearchStrategy[list[Spec]]) -> st.SearchStrategy[Spec]:
    fields: dict[str, Any] = {name: entry[1] for name, entry in SCALARS.items()}
    fields.update({name: st.lists(entry[1], max_size=3) for name, entry in REPEATED.items()})
    fields.update({name: st.lists(entry[1], max_size=4) for name, entry in PACKED.items()})
    fields["field_nested"] = children
    return st.fixed_dictionaries({}, optional=fields)


SPECS: st.SearchStrategy[Spec] = st.recursive(
    _spec_strategy(st.just([])),
    lambda inner: _spec_strategy(st.lists(inner, max_size=2)),
    max_leaves=4,
)
FLAT_SPECS: st.SearchStrategy[Spec] = _spec_strategy(st.just([]))


def write_spec(msg: Message, spec: Spec) -> None:
    """Writes `spec` with protozero, in field-id order like protobuf serializes."""
    for name, (field_id, _, write, _) in SCALARS.items():
        if name in spec:
            write(msg, field_id, spec[name])
        if name == "field_bool":
            for child in spec.get("field_nested", []):
                write_spec(msg.begin_nested_message(14, Message), child)
    for name, (field_id, _, write, _) in REPEATED.items():
        for value in spec.get(name, []):
            write(msg, field_id, value)
    for name, (field_id, _, write) in PACKED.items():
        if spec.get(name):
            write(msg, field_id, spec[name])


def to_pb(cls: Any, spec: Spec) -> Any:
    msg = cls()
    for name, value in spec.items():
        if name == "field_nested":
            for child in value:
                msg.field_nested.append(to_pb(cls, child))
        elif isinstance(value, list):
            getattr(msg, name).extend(value)
        else:
            setattr(msg, name, value)
    return msg


def read_spec(decoder: ProtoDecoder) -> Spec:
    """Rebuilds a spec from bytes with protozero's decoder."""
    by_id = decoder.fields_by_id()
    assert decoder.error is None
    spec: Spec = {}
    for name, (field_id, _, _, read) in SCALARS.items():
        if field_id in by_id:
            spec[name] = read(by_id[field_id][-1])
    for name, (field_id, _, _, read) in REPEATED.items():
        if field_id in by_id:
            spec[name] = [read(f) for f in by_id[field_id]]
    readers: dict[str, Callable[[Field], list[Any]]] = {
        "packed_int32": lambda f: [v - (1 << 64) if v >> 63 else v for v in f.packed_varints()],
        "packed_sint64": lambda f: [(v >> 1) ^ -(v & 1) for v in f.packed_varints()],
        "packed_fixed32": lambda f: list(f.packed_fixed32()),
        "packed_double": lambda f: list(f.packed_doubles()),
        "packed_float": lambda f: list(f.packed_floats()),
        "packed_sfixed64": lambda f: [v - (1 << 64) if v >> 63 else v for v in f.packed_fixed64()],
    }
    for name, (field_id, _, _) in PACKED.items():
        if field_id in by_id:
            spec[name] = [v for f in by_id[field_id] for v in readers[name](f)]
    if 14 in by_id:
        spec["field_nested"] = [read_spec(f.as_message()) for f in by_id[14]]
    return spec


def normalized(spec: Spec) -> Spec:
    """Drops empty repeated fields, which do not exist on the wire."""
    out: Spec = {}
    for name, value in spec.items():
        if name == "field_nested":
            if value:
                out[name] = [normalized(child) for child in value]
        elif not isinstance(value, list) or value:
            out[name] = value
    return out


@settings(max_examples=200, deadline=None)
@given(spec=SPECS)
def test_protozero_bytes_parse_with_protobuf(pb: dict[str, Any], spec: Spec) -> None:
    hb = HeapBuffered(Message)
    write_spec(hb.msg, spec)
    ours = hb.serialize()
    cls = pb["pztest.EveryField"]
    assert cls.FromString(ours) == to_pb(cls, spec)


@settings(max_examples=200, deadline=None)
@given(spec=SPECS)
def test_protobuf_bytes_decode_with_protozero(pb: dict[str, Any], spec: Spec) -> None:
    data = to_pb(pb["pztest.EveryField"], spec).SerializeToString()
    assert read_spec(ProtoDecoder(data)) == normalized(spec)


class SizesDelegate:
    """Hands out ranges of the given sizes (cycling), each inside a larger padded buffer."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.ranges: list[tuple[bytearray, int, int]] = []
        self.writer: Any = None

    def get_new_buffer(self) -> tuple[bytearray, int, int]:
        if self.ranges:
            buf, begin, _ = self.ranges[-1]
            self.ranges[-1] = (buf, begin, self.writer.write_ptr)
        size = self.sizes[len(self.ranges) % len(self.sizes)]
        buf = bytearray(b"\xa5" * (size + 6))
        self.ranges.append((buf, 3, 3 + size))
        return buf, 3, 3 + size

    def stitch(self) -> bytes:
        if self.ranges:
            buf, begin, _ = self.ranges[-1]
            self.ranges[-1] = (buf, begin, self.writer.write_ptr)
        return b"".join(bytes(b[s:e]) for b, s, e in self.ranges)


def _write_scattered(spec: Spec, sizes: list[int]) -> bytes:
    delegate = SizesDelegate(sizes)
    writer = ScatteredStreamWriter(delegate)
    delegate.writer = writer
    msg = Message()
    msg.reset(writer)
    write_spec(msg, spec)
    msg.finalize()
    return delegate.stitch()


def _same_message(scattered: bytes, contiguous: bytes) -> bool:
    """The same fields; nested sizes split across ranges keep 4 bytes where upstream's would."""
    return (
        read_spec(ProtoDecoder(scattered)) == read_spec(ProtoDecoder(contiguous))
        and len(scattered) >= len(contiguous)
        and (len(scattered) - len(contiguous)) % 3 == 0
    )


def _write_contiguous(spec: Spec) -> bytes:
    hb = HeapBuffered(Message, initial_slice_size=1 << 16)
    write_spec(hb.msg, spec)
    return hb.serialize()


@settings(max_examples=150, deadline=None)
@given(spec=SPECS, sizes=st.lists(st.integers(4, 16), min_size=1, max_size=8))
def test_scattered_nested_writes_match_one_buffer(spec: Spec, sizes: list[int]) -> None:
    assert _same_message(_write_scattered(spec, sizes), _write_contiguous(spec))


@settings(max_examples=100, deadline=None)
@given(spec=FLAT_SPECS, sizes=st.lists(st.integers(1, 16), min_size=1, max_size=8))
def test_scattered_flat_writes_match_one_buffer(spec: Spec, sizes: list[int]) -> None:
    assert _write_scattered(spec, sizes) == _write_contiguous(spec)


@settings(max_examples=100, deadline=None)
@given(spec=SPECS, size=st.integers(4, 16))
def test_heap_buffer_slices_hold_the_same_bytes(spec: Spec, size: int) -> None:
    hb = HeapBuffered(Message, initial_slice_size=size, maximum_slice_size=size)
    write_spec(hb.msg, spec)
    data = hb.serialize()
    assert _same_message(data, _write_contiguous(spec))
    assert b"".join(bytes(s) for s in hb.slices()) == data


def test_float_special_values_round_trip() -> None:
    hb = HeapBuffered(Message)
    hb.msg.append_double(12, math.inf)
    hb.msg.append_float(11, -math.inf)
    hb.msg.append_double(12, math.nan)
    fields = list(ProtoDecoder(hb.serialize()))
    assert fields[0].as_double() == math.inf
    assert fields[1].as_float() == -math.inf
    assert math.isnan(fields[2].as_double())
    assert struct.pack("<d", fields[2].as_double()) == struct.pack("<d", math.nan)


class PatchingDelegate:
    """Hands out chunks like a TraceWriter: on each switch it snapshots the chunk it hands off and
    moves the size fields of open nested messages that lie in it into patch buffers."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.root: Message | None = None
        self.writer: ScatteredStreamWriter | None = None
        self.chunks: list[bytearray] = []
        self.handed_off: list[bytes] = []
        self.patches: list[tuple[int, int, bytearray]] = []

    def get_new_buffer(self) -> tuple[bytearray, int, int]:
        if self.chunks:
            assert self.root is not None
            assert self.writer is not None
            old = self.chunks[-1]
            nested = self.root.nested_message
            while nested is not None:
                if nested.size_field_buffer is old:
                    patch = bytearray(4)
                    self.patches.append((len(self.chunks) - 1, nested.size_field_offset, patch))
                    nested.set_size_field(patch, 0)
                nested = nested.nested_message
            self.handed_off.append(bytes(old[: self.writer.write_ptr]))
        chunk = bytearray(self.size)
        self.chunks.append(chunk)
        return chunk, 0, self.size

    def stitch(self) -> bytes:
        assert self.writer is not None
        parts = [bytearray(c) for c in self.handed_off]
        if self.chunks:
            parts.append(bytearray(self.chunks[-1][: self.writer.write_ptr]))
        for index, offset, patch in self.patches:
            parts[index][offset : offset + 4] = patch
        return b"".join(parts)


@settings(max_examples=150, deadline=None)
@given(spec=SPECS, size=st.integers(4, 24))
def test_size_fields_moved_to_patches_give_the_same_message(spec: Spec, size: int) -> None:
    delegate = PatchingDelegate(size)
    writer = ScatteredStreamWriter(delegate)
    root = Message()
    delegate.root = root
    delegate.writer = writer
    root.reset(writer)
    write_spec(root, spec)
    root.finalize()
    # Nothing was written into a chunk after it was handed off: the sizes went to the patches.
    old_chunks = delegate.chunks[:-1]
    still = [bytes(c[: len(h)]) for c, h in zip(old_chunks, delegate.handed_off, strict=True)]
    assert still == delegate.handed_off
    assert all(p != bytearray(4) for _, _, p in delegate.patches)
    assert _same_message(delegate.stitch(), _write_contiguous(spec))


def test_a_size_field_in_a_handed_off_chunk_goes_to_a_patch() -> None:
    spec: Spec = {"field_nested": [{"field_string": "x" * 30, "field_nested": [{}]}]}
    delegate = PatchingDelegate(8)
    writer = ScatteredStreamWriter(delegate)
    root = Message()
    delegate.root = root
    delegate.writer = writer
    root.reset(writer)
    write_spec(root, spec)
    root.finalize()
    assert [(index, offset) for index, offset, _ in delegate.patches] == [(0, 1)]
    # 2+1+30 bytes of string, then the inner empty message compacted to a tag and a 1-byte size.
    assert delegate.patches[0][2] == bytearray(b"\xa3\x80\x80\x00")
    assert _same_message(delegate.stitch(), _write_contiguous(spec))
