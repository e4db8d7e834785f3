"""CommitData's chunks moved from a producer's SMB into a buffer: what stays, what is counted."""

from __future__ import annotations

from dataclasses import dataclass, field

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_service.core._chunk_mover import move_chunks
from perfetto_service.core._trace_buffer import PacketSequenceProperties, TraceBuffer
from perfetto_smb import PageLayout, SharedMemoryABI, SharedMemoryReader
from perfetto_smb._abi import pack_chunk_header
from service_testlib import fragment, read_all

PAGE = 4096
BUFFER_ID = 7


class _ChangingSequence(PacketSequenceProperties):
    """A sequence whose first use, during a chunk's copy, unpartitions the chunk's page: the
    producer changing the page while the service copies the chunk."""

    abi: SharedMemoryABI

    @property
    def producer_id(self) -> int:
        if self.abi.words[0]:
            self.abi.words[0] = 0
        return 1


@dataclass
class _Endpoint:
    """The producer endpoint's part the chunk mover reads."""

    sequences: dict[int, PacketSequenceProperties]
    allowed_target_buffers: set[int] = field(default_factory=lambda: {BUFFER_ID})
    writers: dict[int, int] = field(default_factory=dict)

    def sequence(self, writer_id: int) -> PacketSequenceProperties:
        return self.sequences[writer_id]


def _commit(abi: SharedMemoryABI, idx: int, writer_id: int, chunk_id: int, packet: bytes) -> None:
    """Writes chunk `chunk_id` of a writer, holding `packet`, at chunk `idx` of page 0 and
    marks it Complete."""
    if abi.is_page_free(0):
        abi.try_partition_page(0, PageLayout.DIV4)
    chunk = abi.try_acquire_chunk_for_writing(0, idx, chunk_id=chunk_id, writer_id=writer_id)
    assert chunk is not None
    abi.buffer[chunk.begin : chunk.begin + 8] = pack_chunk_header(chunk_id, writer_id, 1, 0)
    payload = fragment(packet)
    abi.buffer[chunk.payload_begin : chunk.payload_begin + len(payload)] = payload
    abi.release_chunk_as_complete(chunk)


def _request(*chunks: int) -> bytes:
    request = CommitDataRequest()
    for idx in chunks:
        request.chunks_to_move.add(page=0, chunk=idx, target_buffer=BUFFER_ID)
    return request.SerializeToString()


def test_a_chunk_changed_while_copied_stays_and_is_counted() -> None:
    abi = SharedMemoryABI(bytearray(PAGE * 2), PAGE)
    try:
        changing = _ChangingSequence(1, 1000, 4242, 1)
        changing.abi = abi
        endpoint = _Endpoint({1: changing})
        reader = SharedMemoryReader(abi)
        buffer = TraceBuffer(PAGE * 4)
        _commit(abi, 0, 1, 0, b"\x08\x01")
        discarded, _, _ = move_chunks({BUFFER_ID: buffer}, endpoint, reader, _request(0))  # type: ignore[arg-type]
        assert discarded == 0
        assert reader.rejected == {"chunk_changed_while_read": 1}
        assert reader.chunks_read == 0
        assert [data for _, data, _ in read_all(buffer)] == [b"\x08\x01"]
    finally:
        abi.close()


def test_chunks_moved_and_bad_chunks_discarded_and_counted() -> None:
    abi = SharedMemoryABI(bytearray(PAGE * 2), PAGE)
    try:
        sequences = {w: PacketSequenceProperties(1, 1000, 4242, w) for w in (1, 2)}
        endpoint = _Endpoint(sequences, writers={2: BUFFER_ID + 1})
        reader = SharedMemoryReader(abi)
        buffer = TraceBuffer(PAGE * 4)
        _commit(abi, 0, 1, 0, b"\x08\x01")
        _commit(abi, 1, 2, 0, b"\x08\x02")  # writer 2 registered another buffer
        _commit(abi, 2, 1, 1, b"\x08\x03")
        # Chunk 2 twice and chunk 3: the page is free once its three chunks are read.
        request = _request(0, 1, 2, 2, 3)
        discarded, _, _ = move_chunks({BUFFER_ID: buffer}, endpoint, reader, request)  # type: ignore[arg-type]
        assert discarded == 3
        assert reader.rejected == {"chunk_out_of_range": 2}
        assert reader.chunks_read == 3
        assert [data for _, data, _ in read_all(buffer)] == [b"\x08\x01", b"\x08\x03"]
        assert abi.is_page_free(0)
    finally:
        abi.close()
