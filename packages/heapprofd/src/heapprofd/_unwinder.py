"""The unwinder thread of one client: owns its ring buffer, socket and /proc fds.

It drains the ring buffer when the client signals (one byte on the socket) and every
`POLL_MS`, turns records into interned callstacks and posts them to the main thread in
batches. Nothing it owns is touched by another thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from heapprofd._native import read_events
from heapprofd._task_runner import TaskRunner
from heapprofd._wire import (
    RECORD_HEAP_NAME,
    RECORD_MALLOC,
    RECORD_PYTHON_FRAME,
)

if TYPE_CHECKING:
    from heapprofd._native import SharedRingBuffer

__all__ = ["ClientEnd", "RecordBatch", "Unwinder"]

_log = logging.getLogger("heapprofd")

POLL_MS = 50
_MAX_RECORDS_PER_DRAIN = 4096
_TYPE = struct.Struct("<Q")
_MALLOC = struct.Struct("<QQQQQQ")  # seq, size, sample_size, address, sp, timestamp
_MALLOC_HEAP = struct.Struct("<I")
_MALLOC_HEAP_OFFSET = 8 + 320
_MALLOC_PAYLOAD = 8 + 328
_FREE = struct.Struct("<QQI")
_HEAP_NAME = struct.Struct("<QI64s")  # then 4 bytes of padding
_PYTHON_FRAME = struct.Struct("<QIII4x")


@dataclass
class RecordBatch:
    """What one drain produced, in record order."""

    frames: list[tuple[int, str, str, int]] = field(default_factory=list)
    callstacks: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    heap_names: list[tuple[int, str, int]] = field(default_factory=list)
    # (heap_id, address, sample_size, callstack_id) for a Malloc, (heap_id, address) a Free
    events: list[tuple[int, ...]] = field(default_factory=list)
    unwinding_errors: int = 0


@dataclass
class ClientEnd:
    """How a client's connection ended."""

    stats: dict[str, int]
    corrupt: bool
    by_daemon: bool


class Unwinder:
    """Runs one client's connection on its own thread."""

    def __init__(
        self,
        pid: int,
        sock: socket.socket,
        *,
        ring: SharedRingBuffer,
        proc_fds: tuple[int, int],
        post_batch: Callable[[RecordBatch], None],
        post_end: Callable[[ClientEnd], None],
    ) -> None:
        self.pid = pid
        self._sock = sock
        self._ring = ring
        self._proc_fds = proc_fds
        self._post_batch = post_batch
        self._post_end = post_end
        self._runner = TaskRunner()
        self._frames: dict[int, int] = {}  # client frame id -> itself, once described
        self._callstacks: dict[bytes, int] = {}  # Malloc payload -> callstack id
        self._corrupt = False
        self._ended = False
        self._thread = threading.Thread(
            target=self._run, name=f"heapprofd-unwind-{pid}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        """Asks the thread to drain, tell the client to stop and end (from any thread)."""
        self._runner.post_task(lambda: self._end(by_daemon=True))

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    # On the unwinder thread.

    def _run(self) -> None:
        self._sock.setblocking(False)
        self._runner.add_fd_watch(self._sock.fileno(), self._on_readable)
        self._runner.post_delayed_task(self._poll, POLL_MS)
        try:
            self._runner.run()
        finally:
            self._runner.close()

    def _poll(self) -> None:
        if self._ended:
            return
        self._drain()
        self._runner.post_delayed_task(self._poll, POLL_MS)

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._end(by_daemon=False)
            return
        self._drain()

    def _drain(self) -> None:
        self._drain_all()
        if self._corrupt:
            self._end(by_daemon=True)
            return
        self._ring.set_reader_paused()

    def _drain_all(self) -> None:
        ring = self._ring
        while not self._corrupt:
            events, slow, corrupt = read_events(ring, _MAX_RECORDS_PER_DRAIN, self._callstacks)
            self._corrupt = corrupt
            if events:
                batch = RecordBatch(events=events)  # type: ignore[arg-type]
                if slow:
                    self._parse_slow(batch, slow)
                self._post_batch(batch)
            if len(events) < _MAX_RECORDS_PER_DRAIN:
                break

    def _parse_slow(self, batch: RecordBatch, slow: list[int]) -> None:
        """Parses the records the fast path left as bytes (in place, in order)."""
        events: list[tuple[int, ...] | bytes] = batch.events  # type: ignore[assignment]
        for position, index in enumerate(slow):
            record = events[index]
            assert isinstance(record, bytes)
            try:
                events[index] = self._parse(batch, record)
            except (struct.error, ValueError, UnicodeError) as exc:
                _log.warning("pid %d: bad record (%s); disconnecting it", self.pid, exc)
                self._corrupt = True
                del events[index:]
                del slow[position:]
                return
        batch.events = [event for event in events if event != ()]  # type: ignore[misc]

    def _parse(self, batch: RecordBatch, record: bytes) -> tuple[int, ...]:
        """One record off the fast path: a new callstack's Malloc, a frame, a heap name."""
        (kind,) = _TYPE.unpack_from(record)
        if kind == RECORD_MALLOC:
            _seq, _size, sample, address, _sp, _ts = _MALLOC.unpack_from(record, 8)
            (heap,) = _MALLOC_HEAP.unpack_from(record, _MALLOC_HEAP_OFFSET)
            key = record[_MALLOC_PAYLOAD:]
            if len(key) % 8:
                raise ValueError("malloc payload is not a list of frame ids")
            cs = self._callstacks.get(key)
            if cs is None:
                stack = struct.unpack(f"<{len(key) // 8}Q", key)[::-1]
                if any(fid not in self._frames for fid in stack):
                    batch.unwinding_errors += 1
                    stack = tuple(fid if fid in self._frames else 0 for fid in stack)
                cs = self._callstacks[key] = len(self._callstacks) + 1
                batch.callstacks.append((cs, stack))
            return (heap, address, sample, cs)
        if kind == RECORD_PYTHON_FRAME:
            fid, line, name_len, file_len = _PYTHON_FRAME.unpack_from(record, 8)
            start = 8 + _PYTHON_FRAME.size
            end = start + name_len + file_len
            if fid == 0 or end > len(record):
                raise ValueError("bad python frame record")
            name = record[start : start + name_len].decode(errors="replace")
            path = record[start + name_len : end].decode(errors="replace")
            self._frames[fid] = fid
            batch.frames.append((fid, name, path, line))
            return ()
        if kind == RECORD_HEAP_NAME and len(record) == 8 + _HEAP_NAME.size + 4:
            interval, heap, raw = _HEAP_NAME.unpack_from(record, 8)
            batch.heap_names.append(
                (heap, raw.split(b"\0", 1)[0].decode(errors="replace"), interval)
            )
            return ()
        raise ValueError(f"unknown or malformed record (type {kind}, {len(record)} bytes)")

    def _end(self, by_daemon: bool) -> None:
        if self._ended:
            return
        self._ended = True
        ring = self._ring
        if not self._corrupt:
            try:
                self._drain_all()
            except Exception:
                _log.exception("pid %d: final drain failed", self.pid)
        stats = ring.stats()
        if by_daemon:
            ring.set_shutting_down()
        self._runner.remove_fd_watch(self._sock.fileno())
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        for fd in self._proc_fds:
            os.close(fd)
        ring.close()
        self._post_end(ClientEnd(stats, self._corrupt, by_daemon))
        self._runner.quit()
