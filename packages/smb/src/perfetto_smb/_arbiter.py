"""The producer side of an SMB: hands chunks to writers and batches their commits."""

from __future__ import annotations

import collections
import mmap
import threading
import time
import weakref
from collections.abc import Callable, Mapping

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_protos.common.commit_data_request_pb2 import CommitDataRequest
from perfetto_protos.trace.trace_packet_pbzero import TracePacket

from perfetto_smb._abi import (
    CHUNK_MASK,
    CHUNK_SHIFT,
    LAYOUT_MASK,
    LAYOUT_SHIFT,
    MAX_WRITER_ID,
    NUM_CHUNKS_FOR_LAYOUT,
    PageLayout,
)
from perfetto_smb._errors import SmbError
from perfetto_smb._fragments import MAX_PATCHES_PER_CHUNK_TO_PATCH
from perfetto_smb._patch_list import Patch
from perfetto_smb._policy import BufferExhaustedPolicy
from perfetto_smb._trace_writer import TraceWriter

if not cython.compiled:  # compiled, _arbiter.pxd cimports them from _abi
    from perfetto_smb._abi import Chunk, SharedMemoryABI

MAX_COMMIT_DATA_REQUEST_SIZE = 128 * 1024 - 512
"""Emulation mode splits requests so that each stays below this many bytes."""

CommitCallback = Callable[[CommitDataRequest, Callable[[], None] | None], None]
"""Sends one CommitDataRequest; the second argument, if not None, is to be called once the
service has acknowledged it."""
PostTask = Callable[[Callable[[], None]], None]
"""Runs a function soon on the IPC thread."""


class WriterIdAllocator:
    """Writer ids 1..max_id, handed out round-robin from the last one given."""

    def __init__(self, max_id: int = MAX_WRITER_ID) -> None:
        self._max_id = max_id
        self._last = 0
        self._used: set[int] = set()

    def allocate(self) -> int:
        """A free id, or 0 if all are taken."""
        for _ in range(self._max_id):
            self._last = self._last + 1 if self._last < self._max_id else 1
            if self._last not in self._used:
                self._used.add(self._last)
                return self._last
        return 0

    def free(self, writer_id: int) -> None:
        """Returns an id; freeing an id that is not allocated is an error."""
        if writer_id not in self._used:
            raise SmbError(f"writer id {writer_id} is not allocated")
        self._used.discard(writer_id)

    def is_empty(self) -> bool:
        """Whether no id is allocated."""
        return not self._used


class SharedMemoryArbiter:
    """Partitions an SMB's pages into chunks and hands them to TraceWriters.

    Completed chunks and ready patches accumulate in one CommitDataRequest that is sent
    through `commit_callback` when flushed: by a task given to `post_task` (if any) as soon
    as a batch starts, by `flush_pending_commit_data_requests()`, or when a writer stalls.
    Requests are sent one at a time and in order, from whichever thread flushes.
    `register_writer(writer_id, target_buffer)` and `unregister_writer(writer_id)` are told
    about writers so that the IPC layer can forward RegisterTraceWriter and friends.
    """

    __slots__ = (
        "__weakref__",
        "_bytes_pending",
        "_closed",
        "_commit_callback",
        "_flush_posted",
        "_lock",
        "_may_stall",
        "_page_idx",
        "_post_task",
        "_register_writer",
        "_request",
        "_send_lock",
        "_unregister_writer",
        "_writer_ids",
        "_writers",
        "abi",
        "page_layout",
        "stall_timeout",
    )

    def __init__(
        self,
        buffer: mmap.mmap | bytearray,
        page_size: int,
        commit_callback: CommitCallback,
        *,
        post_task: PostTask | None = None,
        emulation: bool = False,
        page_layout: PageLayout = PageLayout.DIV1,
        stall_timeout: float = 10.0,
        register_writer: Callable[[int, int], None] | None = None,
        unregister_writer: Callable[[int], None] | None = None,
        may_stall: Callable[[], bool] | None = None,
    ) -> None:
        if not PageLayout.DIV1 <= page_layout <= PageLayout.DIV14:
            raise SmbError(f"cannot partition pages with layout {page_layout!r}")
        self.abi = SharedMemoryABI(buffer, page_size, emulation=emulation)
        self.page_layout = page_layout
        self.stall_timeout = stall_timeout
        self._commit_callback = commit_callback
        self._post_task = post_task
        self._register_writer = register_writer
        self._unregister_writer = unregister_writer
        self._may_stall = may_stall
        self._lock = threading.Lock()
        self._send_lock = threading.RLock()
        self._page_idx = 0
        self._request: CommitDataRequest | None = None
        self._bytes_pending = 0
        self._flush_posted = False
        self._writer_ids = WriterIdAllocator()
        self._writers: weakref.WeakSet[TraceWriter] = weakref.WeakSet()
        self._closed = False

    # Writers.

    def create_trace_writer(
        self,
        target_buffer: int,
        policy: BufferExhaustedPolicy = BufferExhaustedPolicy.STALL,
        packet_type: type[TracePacket] = TracePacket,
    ) -> TraceWriter:
        """A new TraceWriter for `target_buffer` (> 0), to be used by one thread at a time.

        `packet_type` is the root message class `new_trace_packet()` returns (TracePacket or
        a subclass of it).
        """
        if target_buffer <= 0:
            raise SmbError(f"target buffer must be positive, got {target_buffer}")
        with self._lock:
            if self._closed:
                raise SmbError("the arbiter is shut down")
            writer_id = self._writer_ids.allocate()
        if writer_id == 0:
            raise SmbError(f"all {MAX_WRITER_ID} writer ids are in use")
        if self._register_writer is not None:
            self._register_writer(writer_id, target_buffer)
        writer = TraceWriter(self, writer_id, target_buffer, policy, packet_type)
        self._writers.add(writer)
        return writer

    def release_writer_id(self, writer_id: int) -> None:
        """Called by a TraceWriter when it is closed."""
        with self._lock:
            self._writer_ids.free(writer_id)
        if self._unregister_writer is not None:
            self._unregister_writer(writer_id)

    def try_shutdown(self) -> bool:
        """Refuses new writers; True if no writer is left (the SMB can then be unmapped)."""
        with self._lock:
            self._closed = True
            return self._writer_ids.is_empty()

    def close(self) -> None:
        """Releases the SMB mapping; the arbiter and its writers are unusable after."""
        for writer in list(self._writers):
            writer.detach_buffer()
        self.abi.close()

    # Chunks.

    def get_new_chunk(
        self,
        writer_id: int,
        chunk_id: int,
        packet_count: int,
        flags: int,
        policy: BufferExhaustedPolicy,
    ) -> Chunk | None:
        """A Free chunk moved to BeingWritten with the given header, or None (DROP).

        STALL waits (flushing pending commits now and then) up to `stall_timeout` seconds,
        then raises SmbError; STALL_THEN_DROP returns None at that point instead. Where
        `may_stall()` is False (the thread that would free chunks), neither waits.
        """
        stall_count = 0
        stall_interval = 0.0
        deadline = 0.0
        while True:
            chunk = self._try_get_free_chunk(writer_id, chunk_id, packet_count, flags)
            if chunk is not None:
                return chunk
            if policy is BufferExhaustedPolicy.DROP:
                return None
            now = time.monotonic()
            if stall_count == 0:
                deadline = now + self.stall_timeout
                if self._may_stall is not None and not self._may_stall():
                    if policy is BufferExhaustedPolicy.STALL_THEN_DROP:
                        return None
                    raise SmbError(
                        f"shared memory buffer full (writer {writer_id}) on the thread that "
                        "drains it: waiting would never end"
                    )
            elif now >= deadline:
                if policy is BufferExhaustedPolicy.STALL_THEN_DROP:
                    return None
                raise SmbError(
                    f"shared memory buffer full for {self.stall_timeout} s "
                    f"(writer {writer_id}); is the service draining it?"
                )
            stall_count += 1
            if stall_count % 2 == 0:
                self.flush_pending_commit_data_requests()
            time.sleep(stall_interval)
            stall_interval = min(0.1, (stall_interval + 0.000001) * 8)

    def _try_get_free_chunk(
        self, writer_id: int, chunk_id: int, packet_count: int, flags: int
    ) -> Chunk | None:
        abi = self.abi
        words = abi.words
        page_words = abi.page_size >> 2
        num_pages = abi.num_pages
        layout = self.page_layout
        layout_mask = LAYOUT_MASK
        layout_shift = LAYOUT_SHIFT
        chunk_mask = CHUNK_MASK
        chunk_shift = CHUNK_SHIFT
        with self._lock:
            start = self._page_idx
            for i in range(num_pages):
                page_idx = start + i
                if page_idx >= num_pages:
                    page_idx -= num_pages
                bitmap = words[page_idx * page_words]
                if bitmap == 0:
                    chunk = abi._acquire_in_free_page(
                        page_idx, layout, chunk_id, writer_id, packet_count, flags
                    )
                    if chunk is not None:
                        self._page_idx = page_idx
                        return chunk
                    bitmap = words[page_idx * page_words]
                num_chunks = NUM_CHUNKS_FOR_LAYOUT[(bitmap & layout_mask) >> layout_shift]
                for chunk_idx in range(num_chunks):
                    if (bitmap >> (chunk_idx * chunk_shift)) & chunk_mask:
                        continue
                    chunk = abi._acquire_for_writing(
                        page_idx, chunk_idx, chunk_id, writer_id, packet_count, flags
                    )
                    if chunk is not None:
                        self._page_idx = page_idx
                        return chunk
        return None

    def return_completed_chunk(
        self, chunk: Chunk, target_buffer: int, patch_list: collections.deque[Patch]
    ) -> None:
        """Marks a writer's chunk Complete and queues it (and any ready patches) for commit."""
        self._update_commit_data_request(chunk, chunk.writer_id, target_buffer, patch_list)

    def send_patches(
        self, writer_id: int, target_buffer: int, patch_list: collections.deque[Patch]
    ) -> None:
        """Queues the ready patches at the head of `patch_list` for commit."""
        self._update_commit_data_request(None, writer_id, target_buffer, patch_list)

    def _update_commit_data_request(
        self,
        chunk: Chunk | None,
        writer_id: int,
        target_buffer: int,
        patch_list: collections.deque[Patch],
    ) -> None:
        post = False
        flush_now = False
        with self._lock:
            request = self._request
            if request is None:
                request = self._request = CommitDataRequest()
                if self._post_task is not None and not self._flush_posted:
                    post = self._flush_posted = True
            if chunk is not None:
                self._bytes_pending += chunk.size
                move = request.chunks_to_move.add()
                move.page = self.abi.release_chunk_as_complete(chunk)
                move.chunk = chunk.chunk_idx
                move.target_buffer = target_buffer
            last_patch_request: CommitDataRequest.ChunkToPatch | None = None
            while patch_list and patch_list[0].is_patched():
                patch = patch_list.popleft()
                if (
                    last_patch_request is None
                    or last_patch_request.chunk_id != patch.chunk_id
                    or len(last_patch_request.patches) >= MAX_PATCHES_PER_CHUNK_TO_PATCH
                ):
                    if last_patch_request is not None:
                        last_patch_request.has_more_patches = (
                            last_patch_request.chunk_id == patch.chunk_id
                        )
                    last_patch_request = request.chunks_to_patch.add()
                    last_patch_request.writer_id = writer_id
                    last_patch_request.chunk_id = patch.chunk_id
                    last_patch_request.target_buffer = target_buffer
                entry = last_patch_request.patches.add()
                entry.offset = patch.offset
                entry.data = bytes(patch.size_field)
            if (
                last_patch_request is not None
                and patch_list
                and patch_list[0].chunk_id == last_patch_request.chunk_id
            ):
                last_patch_request.has_more_patches = True
            if self.abi.emulation:
                flush_now = True
            elif (
                last_patch_request is not None or self._bytes_pending >= self.abi.size // 2
            ) and self._post_task is not None:
                post = post or not self._flush_posted
                self._flush_posted = True
        if flush_now:
            self.flush_pending_commit_data_requests()
        elif post and self._post_task is not None:
            self._post_task(self._posted_flush)

    def _posted_flush(self) -> None:
        with self._lock:
            self._flush_posted = False
        self.flush_pending_commit_data_requests()

    def notify_flush_complete(self, flush_request_id: int) -> None:
        """Attaches `flush_request_id` to the pending request (the highest wins) and sends it."""
        with self._lock:
            if self._request is None:
                self._request = CommitDataRequest()
            request = self._request
            request.flush_request_id = max(flush_request_id, request.flush_request_id)
        self.flush_pending_commit_data_requests()

    def flush_pending_commit_data_requests(
        self, callback: Callable[[], None] | None = None
    ) -> None:
        """Sends the pending request now; with nothing pending and a callback, an empty one.

        `callback` is passed on to `commit_callback` with the (last) request.
        """
        with self._send_lock:
            with self._lock:
                request = self._request
                self._request = None
                self._bytes_pending = 0
                if request is not None and self.abi.emulation:
                    self._take_emulated_chunks(request)
            if request is not None:
                if self.abi.emulation:
                    self._send_split(request, callback)
                else:
                    self._commit_callback(request, callback)
            elif callback is not None:
                self._commit_callback(CommitDataRequest(), callback)

    def scrape_emulated_shared_memory_buffer(self, buffer_for_writers: Mapping[int, int]) -> None:
        """Emulation mode: commits copies of the chunks still being written or not yet sent.

        Only chunks of writers in `buffer_for_writers` (writer id -> target buffer) are sent,
        with `chunk_incomplete` set for those still being written; nothing is freed.
        """
        if not self.abi.emulation:
            raise SmbError("scraping from the producer only applies to emulation mode")
        request = CommitDataRequest()
        for chunk, complete in self.abi.scrapable_chunks():
            target_buffer = buffer_for_writers.get(chunk.writer_id)
            if target_buffer is None:
                continue
            move = request.chunks_to_move.add()
            move.page = chunk.page_idx
            move.chunk = chunk.chunk_idx
            move.target_buffer = target_buffer
            move.data = chunk.read()
            move.chunk_incomplete = not complete
        if request.chunks_to_move:
            with self._send_lock:
                self._send_split(request, None)

    def _take_emulated_chunks(self, request: CommitDataRequest) -> None:
        abi = self.abi
        for move in request.chunks_to_move:
            bitmap = abi.page_header_bitmap(move.page)
            chunk = abi.get_chunk_unchecked(move.page, bitmap, move.chunk)
            move.data = chunk.read()
            abi.release_chunk_as_free(chunk)

    def _send_split(self, request: CommitDataRequest, callback: Callable[[], None] | None) -> None:
        if request.ByteSize() < MAX_COMMIT_DATA_REQUEST_SIZE:
            self._commit_callback(request, callback)
            return
        part = CommitDataRequest()
        size = 0
        for move in request.chunks_to_move:
            move_size = len(move.data) + 32
            if size and size + move_size >= MAX_COMMIT_DATA_REQUEST_SIZE:
                self._commit_callback(part, None)
                part = CommitDataRequest()
                size = 0
            size += move_size
            part.chunks_to_move.add().CopyFrom(move)
        for patch in request.chunks_to_patch:
            patch_size = 32 + 20 * len(patch.patches)
            if size and size + patch_size >= MAX_COMMIT_DATA_REQUEST_SIZE:
                self._commit_callback(part, None)
                part = CommitDataRequest()
                size = 0
            size += patch_size
            part.chunks_to_patch.add().CopyFrom(patch)
        if request.HasField("flush_request_id"):
            part.flush_request_id = request.flush_request_id
        self._commit_callback(part, callback)
