"""TraceBuffer against random chunk streams: exactly once, in order, losses marked."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto_service.core._trace_buffer import (
    OverwritePolicy,
    PacketSequenceProperties,
    Patch,
    TraceBuffer,
)
from service_testlib import PATCH, Chunk, ChunkPacker, copy, read_all, seq

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _packet(writer: int, index: int, filler: int) -> bytes:
    """A packet naming its writer and position, padded to vary its size."""
    return bytes([0x08, writer]) + index.to_bytes(3, "little") + bytes(filler)


def _identify(data: bytes) -> tuple[int, int]:
    return data[1], int.from_bytes(data[2:5], "little")


@dataclass
class _Scenario:
    chunks: list[tuple[PacketSequenceProperties, Chunk]]
    expected: dict[int, list[int]]


@st.composite
def _scenarios(draw: st.DrawFn) -> _Scenario:
    writers = draw(st.integers(1, 3))
    payload_size = draw(st.sampled_from([24, 40, 64, 200]))
    chunks: list[tuple[PacketSequenceProperties, Chunk]] = []
    expected: dict[int, list[int]] = {}
    for writer in range(1, writers + 1):
        sizes = draw(st.lists(st.integers(0, 150), min_size=0, max_size=25))
        first_id = draw(st.sampled_from([0, 7, 0xFFFFFFFD]))
        packer = ChunkPacker(payload_size=payload_size, first_chunk_id=first_id)
        for index, filler in enumerate(sizes):
            packer.add(_packet(writer, index, filler))
        expected[writer] = list(range(len(sizes)))
        chunks.extend((seq(writer=writer), chunk) for chunk in packer.flush())
    return _Scenario(chunks, expected)


def _interleave(data: st.DataObject, count: int) -> list[int]:
    """A commit order: mostly in order, with nearby chunks swapped."""
    order = list(range(count))
    for _ in range(data.draw(st.integers(0, count))):
        i = data.draw(st.integers(0, max(count - 2, 0)))
        if i + 1 < count:
            order[i], order[i + 1] = order[i + 1], order[i]
    return order


def _commit_order_and_reads(data: st.DataObject, count: int) -> tuple[list[int], set[int]]:
    """Chunks out of order with reads only at the end, or in order with reads in between.

    Reading between out-of-order commits is outside V1's guarantees: a continuation read
    before the chunk it continues arrives is dropped as an orphan, and a late chunk is read
    after the later ones already read.
    """
    if data.draw(st.booleans()):
        return _interleave(data, count), set()
    return list(range(count)), data.draw(st.sets(st.integers(0, count)))


@given(st.data())
@_SETTINGS
def test_every_packet_is_read_exactly_once_in_order(data: st.DataObject) -> None:
    scenario = data.draw(_scenarios())
    order, read_points = _commit_order_and_reads(data, len(scenario.chunks))
    buffer = TraceBuffer(1 << 20)
    got: dict[int, list[int]] = {writer: [] for writer in scenario.expected}
    for step, position in enumerate(order):
        if step in read_points:
            for props, packet, _ in read_all(buffer):
                writer, index = _identify(packet)
                assert props.writer_id == writer
                got[writer].append(index)
        sequence, chunk = scenario.chunks[position]
        copy(buffer, sequence, chunk)
    for props, packet, _ in read_all(buffer):
        writer, index = _identify(packet)
        assert props.writer_id == writer
        got[writer].append(index)
    assert got == scenario.expected
    assert buffer.stats.abi_violations == 0
    assert buffer.stats.chunks_overwritten == 0


@given(st.data())
@_SETTINGS
def test_ring_overflow_loses_whole_packets_in_order_and_marks_every_loss(
    data: st.DataObject,
) -> None:
    scenario = data.draw(_scenarios())
    order, read_points = _commit_order_and_reads(data, len(scenario.chunks))
    policy = data.draw(st.sampled_from(list(OverwritePolicy)))
    buffer = TraceBuffer(data.draw(st.sampled_from([256, 512, 1024])), policy)
    got: dict[int, list[tuple[int, int]]] = {writer: [] for writer in scenario.expected}

    def drain() -> None:
        for _, packet, dropped in read_all(buffer):
            writer, index = _identify(packet)
            got[writer].append((index, dropped))

    for step, position in enumerate(order):
        if step in read_points:
            drain()
        sequence, chunk = scenario.chunks[position]
        copy(buffer, sequence, chunk)
    drain()
    for writer, entries in got.items():
        indexes = [index for index, _ in entries]
        assert indexes == sorted(set(indexes)), "duplicated or reordered packets"
        previous = -1
        for index, dropped in entries:
            if index != previous + 1:
                assert dropped, f"writer {writer}: loss before packet {index} not marked"
            previous = index
    if policy is OverwritePolicy.DISCARD:
        assert buffer.stats.chunks_overwritten == 0


@given(st.data())
@_SETTINGS
def test_remembered_read_positions_read_like_a_full_walk(data: st.DataObject) -> None:
    scenario = data.draw(_scenarios())
    order = _interleave(data, len(scenario.chunks))
    read_points = data.draw(st.sets(st.integers(0, len(order))))
    size = data.draw(st.sampled_from([256, 1024, 1 << 20]))
    fast = TraceBuffer(size)
    walking = TraceBuffer(size)

    def forget_positions() -> None:
        for sequence_state in walking._sequences.values():
            sequence_state.resume = None

    for step, position in enumerate(order):
        if step in read_points:
            forget_positions()
            assert read_all(fast) == read_all(walking)
        sequence, chunk = scenario.chunks[position]
        copy(fast, sequence, chunk)
        copy(walking, sequence, chunk)
    forget_positions()
    assert read_all(fast) == read_all(walking)
    assert fast.stats.as_dict() == walking.stats.as_dict()


_hostile_op = st.one_of(
    st.tuples(
        st.just("copy"),
        st.integers(1, 2),  # producer
        st.integers(0, 3),  # writer
        st.integers(0, 6) | st.integers(0, 0xFFFFFFFF),  # chunk id
        st.integers(0, 40) | st.integers(-2, 70000),  # fragments
        st.integers(0, 0x3F) | st.integers(-1, 300),  # flags
        st.binary(max_size=120),
        st.booleans(),
    ),
    st.tuples(
        st.just("patch"),
        st.integers(1, 2),
        st.integers(0, 3),
        st.integers(0, 6),
        st.lists(st.tuples(st.integers(-5, 140), st.binary(min_size=3, max_size=5)), max_size=3),
        st.booleans(),
    ),
    st.tuples(st.just("read")),
)


@given(
    ops=st.lists(_hostile_op, max_size=40),
    size=st.sampled_from([256, 1024, 4096]),
    policy=st.sampled_from(list(OverwritePolicy)),
)
@_SETTINGS
def test_hostile_chunks_and_patches_never_raise(
    ops: list[tuple[object, ...]], size: int, policy: OverwritePolicy
) -> None:
    buffer = TraceBuffer(size, policy)
    for op in ops:
        if op[0] == "copy":
            _, producer, writer, chunk_id, fragments, flags, payload, complete = op
            assert isinstance(producer, int)
            assert isinstance(writer, int)
            assert isinstance(chunk_id, int)
            assert isinstance(fragments, int)
            assert isinstance(flags, int)
            assert isinstance(payload, bytes)
            buffer.copy_chunk_untrusted(
                seq(producer, writer),
                chunk_id,
                fragments,
                flags,
                payload,
                chunk_complete=bool(complete),
            )
        elif op[0] == "patch":
            _, producer, writer, chunk_id, patches, pending = op
            assert isinstance(producer, int)
            assert isinstance(writer, int)
            assert isinstance(chunk_id, int)
            assert isinstance(patches, list)
            buffer.try_patch_chunk_contents(
                producer, writer, chunk_id, [Patch(o, d) for o, d in patches], bool(pending)
            )
        else:
            for props, _, dropped in read_all(buffer):
                assert 0 <= props.writer_id <= 3
                assert dropped in (0, 1)


@given(
    hostile=st.lists(
        st.tuples(
            st.integers(0, 8),
            st.integers(0, 30),
            st.integers(0, 0x3F),
            st.binary(max_size=100),
            st.booleans(),
        ),
        max_size=30,
    ),
    sizes=st.lists(st.integers(0, 120), max_size=20),
)
@_SETTINGS
def test_a_hostile_producer_never_disturbs_another_producers_packets(
    hostile: list[tuple[int, int, int, bytes, bool]], sizes: list[int]
) -> None:
    buffer = TraceBuffer(1 << 20)
    packer = ChunkPacker(payload_size=64)
    for index, filler in enumerate(sizes):
        packer.add(_packet(1, index, filler))
    honest = packer.flush()
    bad = seq(producer=9, writer=1)
    good = seq(producer=1, writer=1)
    for step in range(max(len(honest), len(hostile))):
        if step < len(hostile):
            chunk_id, fragments, flags, payload, complete = hostile[step]
            buffer.copy_chunk_untrusted(
                bad,
                chunk_id,
                fragments,
                flags | (PATCH if step % 5 == 4 else 0),
                payload,
                chunk_complete=complete,
            )
            buffer.try_patch_chunk_contents(9, 1, chunk_id, [Patch(0, b"EVIL")], False)
        if step < len(honest):
            copy(buffer, good, honest[step])
    indexes = [_identify(packet)[1] for props, packet, _ in read_all(buffer) if props == good]
    assert indexes == list(range(len(sizes)))


def _read_in_runs(buffer: TraceBuffer, max_bytes: int) -> list[tuple[int, bytes, int]]:
    buffer.begin_read()
    out = []
    while (run := buffer.read_next_packets(max_bytes)) is not None:
        assert run.packets
        for position, packet in enumerate(run.packets):
            dropped = run.previous_packet_dropped if position == 0 else 0
            out.append((run.sequence.writer_id, bytes(packet), dropped))
    return out


@given(st.data())
@_SETTINGS
def test_reading_in_runs_returns_what_reading_one_by_one_does(data: st.DataObject) -> None:
    scenario = data.draw(_scenarios())
    order, read_points = _commit_order_and_reads(data, len(scenario.chunks))
    size = data.draw(st.sampled_from([256, 1024, 1 << 20]))
    max_bytes = data.draw(st.sampled_from([1, 50, 300, 1 << 20]))
    by_run = TraceBuffer(size)
    one_by_one = TraceBuffer(size)

    def compare() -> None:
        expected = [(p.writer_id, packet, d) for p, packet, d in read_all(one_by_one)]
        assert _read_in_runs(by_run, max_bytes) == expected

    for step, position in enumerate(order):
        if step in read_points:
            compare()
        sequence, chunk = scenario.chunks[position]
        copy(by_run, sequence, chunk)
        copy(one_by_one, sequence, chunk)
    compare()
    assert by_run.stats.as_dict() == one_by_one.stats.as_dict()


@given(st.data())
@_SETTINGS
def test_chunks_waiting_for_patches_hold_their_sequence_until_patched(
    data: st.DataObject,
) -> None:
    scenario = data.draw(_scenarios())
    count = len(scenario.chunks)
    patched = data.draw(st.sets(st.integers(0, max(count - 1, 0)), max_size=count))
    patched &= {i for i, (_, c) in enumerate(scenario.chunks) if c.num_fragments}
    # Operations in chunk order; each patch comes at some point after its chunk's commit.
    ops: list[tuple[str, int]] = []
    pending: list[int] = []
    for index in range(count):
        ops.append(("copy", index))
        if index in patched:
            pending.append(index)
        while len(pending) > 0 and data.draw(st.booleans()):
            ops.append(("patch", pending.pop(data.draw(st.integers(0, len(pending) - 1)))))
        if data.draw(st.booleans()):
            ops.append(("read", -1))
    ops.extend(("patch", index) for index in pending)
    buffer = TraceBuffer(1 << 20)
    got: dict[int, list[int]] = {writer: [] for writer in scenario.expected}

    def drain() -> None:
        for _, packet, _ in read_all(buffer):
            writer, index = _identify(packet)
            got[writer].append(index)

    for op, index in ops:
        if op == "read":
            drain()
            continue
        sequence, chunk = scenario.chunks[index]
        if op == "copy":
            if index in patched:
                # Hide 4 bytes of the first fragment until the patch brings them back.
                body = chunk.payload[:4] + b"\xde\xad\xbe\xef" + chunk.payload[8:]
                chunk = Chunk(chunk.chunk_id, chunk.num_fragments, chunk.flags | PATCH, body)
            copy(buffer, sequence, chunk)
        else:
            patch = [Patch(4, chunk.payload[4:8])]
            assert buffer.try_patch_chunk_contents(
                sequence.producer_id, sequence.writer_id, chunk.chunk_id, patch, False
            )
    drain()
    assert got == scenario.expected
