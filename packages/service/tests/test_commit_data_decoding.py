"""The chunk mover's own CommitData decoding against protobuf's, on random and mutated requests."""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_service.core._chunk_mover import (
    ChunkMove,
    ChunkPatches,
    commit_data_request,
    decode_commit_data,
)
from perfetto_service.core._trace_buffer import Patch

Decoded = tuple[list[ChunkMove], list[ChunkPatches], int]

u32 = st.integers(0, 0x7F) | st.integers(0, 2**32 - 1)
u64 = st.integers(0, 0x7F) | st.integers(0, 2**64 - 1)
blobs = st.none() | st.binary(max_size=40)


def protobuf_fields(request: CommitDataRequest) -> Decoded:
    """What `decode_commit_data` must give for `request`, read through protobuf's objects."""
    moves: list[ChunkMove] = [
        (
            move.page,
            move.chunk,
            move.target_buffer,
            move.data if move.HasField("data") else None,
            not move.chunk_incomplete,
        )
        for move in request.chunks_to_move
    ]
    patches: list[ChunkPatches] = [
        (
            entry.target_buffer,
            entry.writer_id,
            entry.chunk_id,
            [Patch(patch.offset, patch.data) for patch in entry.patches],
            entry.has_more_patches,
        )
        for entry in request.chunks_to_patch
    ]
    return moves, patches, request.flush_request_id


@st.composite
def requests(draw: st.DrawFn) -> CommitDataRequest:
    request = CommitDataRequest()
    for _ in range(draw(st.integers(0, 6))):
        move = request.chunks_to_move.add()
        for name in ("page", "chunk", "target_buffer"):
            value = draw(st.none() | u32)
            if value is not None:
                setattr(move, name, value)
        data = draw(blobs)
        if data is not None:
            move.data = data
        incomplete = draw(st.none() | st.booleans())
        if incomplete is not None:
            move.chunk_incomplete = incomplete
    for _ in range(draw(st.integers(0, 3))):
        entry = request.chunks_to_patch.add(
            target_buffer=draw(u32), writer_id=draw(u32), chunk_id=draw(u32)
        )
        for _ in range(draw(st.integers(0, 3))):
            entry.patches.add(offset=draw(u32), data=draw(st.binary(max_size=6)))
        if draw(st.booleans()):
            entry.has_more_patches = draw(st.booleans())
    flush = draw(st.none() | u64)
    if flush is not None:
        request.flush_request_id = flush
    return request


def check_against_protobuf(data: bytes) -> None:
    """The walk decodes `data` as protobuf does, or leaves it to protobuf, which refuses it
    or gives `commit_data_request`'s callers the same request in a layout the mover reads."""
    try:
        expected: CommitDataRequest | None = CommitDataRequest.FromString(data)
    except DecodeError:
        expected = None
    decoded = decode_commit_data(data)
    if expected is None:
        assert decoded is None
        with pytest.raises(DecodeError):
            commit_data_request(data)
        return
    fields = protobuf_fields(expected)
    if decoded is not None:
        assert decoded == fields
    served = commit_data_request(data)
    served_fields = decode_commit_data(served)
    if served_fields is None:  # the pure build's mover reads it with protobuf, as it is
        assert served is data
    else:
        assert served_fields == fields


@settings(max_examples=300, deadline=None)
@given(request=requests())
def test_well_formed_requests_decode_as_protobuf_decodes_them(
    request: CommitDataRequest,
) -> None:
    data = request.SerializeToString()
    assert decode_commit_data(data) == protobuf_fields(request)
    assert commit_data_request(data) is data


# Unknown fields of every wire type, known fields with another wire type, a repeated scalar.
_ODD_FIELDS = [
    b"\x20\x05",  # field 4, varint
    b"\x29" + bytes(8),  # field 5, fixed64
    b"\x35" + bytes(4),  # field 6, fixed32
    b"\x3a\x02ab",  # field 7, bytes
    b"\x0d" + bytes(4),  # field 1 (chunks_to_move) as fixed32: unknown
    b"\x1a\x00",  # field 3 (flush_request_id) as bytes: unknown
    b"\x18\x07",  # flush_request_id again: the last one counts
    b"\x43\x08\x01\x44",  # field 8 as a group
    b"\x80\x80\x80\x80\x10\x01",  # field 2**28 (a five-byte tag), varint
    b"\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # flush id 2**64 - 1 (ten bytes)
    b"\x18\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02",  # a varint beyond 64 bits
    b"\x0a\x04\x08\x80\x80\x04",  # a chunk with a three-byte page
    b"\x0a\x02\x08\x05\x0a\x00",  # two chunks: the second has every field unset
    b"\x0a\x03\x22\x01",  # a chunk's data running past its message
    b"\x12\x04\x22\x02\x08\x01",  # a patch inside a chunk to patch
    b"\x00\x01",  # field 0
    b"\x0f",  # wire type 7
]


@pytest.mark.parametrize("field", _ODD_FIELDS)
def test_unusual_fields_decode_as_protobuf_decodes_them(field: bytes) -> None:
    base = CommitDataRequest()
    base.chunks_to_move.add(page=3, chunk=1, target_buffer=2)
    base.chunks_to_patch.add(writer_id=1, chunk_id=9).patches.add(offset=4, data=b"abcd")
    for data in (field, field + base.SerializeToString(), base.SerializeToString() + field):
        check_against_protobuf(data)


def _mutated(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        action = rng.randrange(5)
        pos = rng.randint(0, len(out))
        if action == 0 and out and pos < len(out):
            out[pos] = rng.randrange(256)
        elif action == 1 and out and pos < len(out):
            out[pos] ^= 1 << rng.randrange(8)
        elif action == 2:
            out[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif action == 3:
            del out[pos : pos + rng.randint(1, 4)]
        else:
            del out[pos:]
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(request=requests(), seed=st.integers(0, 2**32))
def test_mutated_requests_decode_as_protobuf_decodes_them(
    request: CommitDataRequest, seed: int
) -> None:
    check_against_protobuf(_mutated(random.Random(seed), request.SerializeToString()))


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_decode_as_protobuf_decodes_them(data: bytes) -> None:
    check_against_protobuf(data)


def test_the_walk_reads_a_view_of_a_larger_buffer() -> None:
    request = CommitDataRequest()
    request.chunks_to_move.add(page=1, chunk=2, target_buffer=3, data=b"xyz")
    data = request.SerializeToString()
    view = memoryview(b"\xff" + data + b"\xff")[1:-1]
    assert decode_commit_data(view) == ([(1, 2, 3, b"xyz", True)], [], 0)
    assert commit_data_request(view) is view
