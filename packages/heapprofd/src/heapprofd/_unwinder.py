"""The unwinder thread of one client: owns its ring buffer, socket and /proc fds.

It drains the ring buffer when the client signals (one byte on the socket) and every
`POLL_MS`, turns records into interned callstacks and posts them to the main thread in
batches. Nothing it owns is touched by another thread.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from heapprofd._errors import UnwindError
from heapprofd._native import read_events
from heapprofd._task_runner import TaskRunner
from heapprofd._wire import (
    RECORD_HEAP_NAME,
    RECORD_MALLOC,
    RECORD_PYTHON_FRAME,
)

if TYPE_CHECKING:
    from heapprofd._native import SharedRingBuffer

__all__ = ["ClientEnd", "NativeFrame", "NativeMapping", "RecordBatch", "Unwinder", "module_maps"]

_log = logging.getLogger("heapprofd")

POLL_MS = 50
_MAX_RECORDS_PER_DRAIN = 4096
_TYPE = struct.Struct("<Q")
_MALLOC = struct.Struct("<QQQQQQ")  # seq, size, sample_size, address, sp, timestamp
_MALLOC_HEAP = struct.Struct("<I")
_MALLOC_HEAP_OFFSET = 8 + 320
_MALLOC_ARCH_OFFSET = 8 + 324
_REGISTERS_OFFSET = 8 + 48
_REGISTERS_SIZE = 17 * 8  # x86-64: rax..r15 and rip, in DWARF order
ARCH_X86_64 = 4  # upstream's (unwindstack's) ArchEnum
NATIVE_FRAME_BASE = 1 << 63
"""Native frame ids start here, apart from the client's Python frame ids."""
PRELOAD_LIBRARY = "libheapprofd_preload.so"
CLIENT_HOOKS = "/heapprofd/_native."
"""In the path of the Python client's compiled module, whose allocator hooks native stacks
pass through."""
EVAL_LOOP_FUNCTIONS = frozenset({"_PyEval_EvalFrameDefault", "_PyEval_EvalFrame"})
"""CPython's evaluation loop, where a mixed stack's Python frames go."""
_MALLOC_SP_OFFSET = 8 + 32
_MALLOC_PAYLOAD = 8 + 328
_FREE = struct.Struct("<QQI")
_HEAP_NAME = struct.Struct("<QI64s")  # then 4 bytes of padding
_PYTHON_FRAME = struct.Struct("<QIII4x")


NativeMapping = tuple[str, str, int, int, int]
"""(path, build id in hex, start, end, file offset) of one /proc/PID/maps entry."""
NativeFrame = tuple[str, NativeMapping, int]
"""(function, mapping, pc relative to the ELF file's addresses)."""


@dataclass
class RecordBatch:
    """What one drain produced, in record order."""

    frames: list[tuple[int, str, str, int]] = field(default_factory=list)
    native_frames: list[tuple[int, NativeFrame]] = field(default_factory=list)
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


def module_maps(text: bytes) -> bytes:
    """The lines of a /proc/PID/maps text that can hold code: those of a file, or executable.
    The process's other mappings (its heap, anonymous memory) change as it allocates, but
    not its modules, so the unwinder's caches outlive them."""
    lines = []
    for line in text.splitlines(keepends=True):
        parts = line.split(maxsplit=5)
        if (len(parts) > 5 and parts[5].startswith(b"/")) or (len(parts) > 1 and b"x" in parts[1]):
            lines.append(line)
    return b"".join(lines)


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
        native: bool = False,
    ) -> None:
        self.pid = pid
        self._expect_native = native
        self._sock = sock
        self._ring = ring
        self._proc_fds = proc_fds
        self._post_batch = post_batch
        self._post_end = post_end
        self._runner = TaskRunner()
        self._frames: dict[int, int] = {}  # client frame id -> the first id of its content
        self._frame_ids: dict[tuple[str, str, int], int] = {}  # frame content -> first id
        self._callstacks: dict[bytes, int] = {}  # Malloc payload -> callstack id
        self._native: Any = None  # the NativeUnwinder, made at the first native sample
        self._native_failed = False
        self._maps_gone = False
        self._maps_text = b""
        self._maps: list[tuple[int, int, int, str]] = []  # (start, end, offset, path), sorted
        self._native_frames: dict[NativeFrame, int] = {}
        self._pc_frames: dict[int, NativeFrame] = {}
        self._native_stacks: dict[tuple[int, ...], tuple[list[int], int]] = {}  # by pcs
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
        if self._expect_native:  # the maps and ELF files while the process surely lives
            self._native_unwinder()
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

    def _drop(self, reason: str) -> None:
        """Marks the client bad: it is disconnected and its dumps say `buffer_corrupted`."""
        _log.warning("pid %d: %s; disconnecting it", self.pid, reason)
        self._corrupt = True

    def _drain_all(self) -> None:
        ring = self._ring
        if self._native is not None:  # libraries loaded since, while the process surely lives
            self._reload_maps()
        batch, records, more = RecordBatch(), 0, True
        while more and not self._corrupt:
            events, slow, corrupt, errors, more = read_events(
                ring, _MAX_RECORDS_PER_DRAIN - records, self._callstacks, self._native
            )
            if corrupt:
                self._drop("its ring buffer is corrupt (positions or record sizes)")
            records += len(events)
            batch.unwinding_errors += errors
            if slow:
                self._parse_slow(batch, events, slow)
            batch.events += events
            if records and (records >= _MAX_RECORDS_PER_DRAIN or not more or self._corrupt):
                self._post_batch(batch)
                batch, records = RecordBatch(), 0

    def _parse_slow(self, batch: RecordBatch, events: list[Any], slow: list[int]) -> None:
        """Parses the records the fast path left (in place, in order): a record's bytes, or a
        native sample whose callstack the unwinder did not know."""
        for index in slow:
            record = events[index]
            try:
                if isinstance(record, bytes):
                    events[index] = self._parse(batch, record)
                else:
                    heap, address, sample, raw, ids_len, pcs, error = record
                    cs = self._native_callstack(batch, raw, ids_len, pcs, error)
                    events[index] = (heap, address, sample, cs)
            except Exception as exc:  # whatever a client writes is untrusted input
                self._drop(f"bad record ({type(exc).__name__}: {exc})")
                del events[index:]
                break
        events[:] = [event for event in events if event != ()]

    def _parse(self, batch: RecordBatch, record: bytes) -> tuple[int, ...]:
        """One record off the fast path: a new callstack's Malloc, a frame, a heap name."""
        (kind,) = _TYPE.unpack_from(record)
        if kind == RECORD_MALLOC:  # a Python stack (read_events took the native ones)
            _seq, _size, sample, address, _sp, _ts = _MALLOC.unpack_from(record, 8)
            (heap,) = _MALLOC_HEAP.unpack_from(record, _MALLOC_HEAP_OFFSET)
            if len(record) < _MALLOC_PAYLOAD:
                raise ValueError(f"malloc record of {len(record)} bytes")
            key = record[_MALLOC_PAYLOAD:]
            if len(key) % 8:
                raise ValueError("malloc payload is not a list of frame ids")
            cs = self._callstacks.get(key)
            if cs is None:
                stack = struct.unpack(f"<{len(key) // 8}Q", key)[::-1]
                if any(fid not in self._frames for fid in stack):
                    batch.unwinding_errors += 1
                stack = tuple(self._frames.get(fid, 0) for fid in stack)
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
            # a frame described again (by a native sample's thread without the GIL) is one
            canonical = self._frame_ids.setdefault((name, path, line), fid)
            if fid in self._frames and self._native is not None:  # an id described again:
                self._native.forget_samples()  # the stacks using it may change
            self._frames[fid] = canonical
            if canonical == fid:
                batch.frames.append((fid, name, path, line))
            return ()
        if kind == RECORD_HEAP_NAME and len(record) == 8 + _HEAP_NAME.size + 4:
            interval, heap, raw = _HEAP_NAME.unpack_from(record, 8)
            batch.heap_names.append(
                (heap, raw.split(b"\0", 1)[0].decode(errors="replace"), interval)
            )
            return ()
        raise ValueError(f"unknown or malformed record (type {kind}, {len(record)} bytes)")

    def _native_callstack(
        self,
        batch: RecordBatch,
        record: bytes,
        ids_len: int,
        pcs: tuple[int, ...] | None,
        error: bool,
    ) -> int:
        """The callstack id of a native sample (its record, whose last `ids_len` bytes are
        its Python frame ids), from its pcs as read_events unwound them (None: not yet)."""
        python_ids = record[len(record) - ids_len :]
        (arch,) = _MALLOC_HEAP.unpack_from(record, _MALLOC_ARCH_OFFSET)
        unwinder = self._native_unwinder() if arch == ARCH_X86_64 else None
        if unwinder is None:
            pcs, error = (), True
        else:
            view = memoryview(record)
            regs = view[_REGISTERS_OFFSET : _REGISTERS_OFFSET + _REGISTERS_SIZE]
            stack = view[_MALLOC_PAYLOAD : len(record) - ids_len]
            (sp,) = _TYPE.unpack_from(record, _MALLOC_SP_OFFSET)
            # with Python frames, the unwind ends in the evaluation loop: they replace the rest
            stop = bool(python_ids)
            if pcs is None:
                found, error = unwinder.unwind(regs, stack, sp, stop)
                pcs = tuple(found)
            if (
                pcs not in self._native_stacks
                and any(unwinder.symbolize(pc) is None for pc in pcs)
                and self._reload_maps()
            ):
                found, error = unwinder.unwind(regs, stack, sp, stop)  # a library loaded since
                pcs = tuple(found)
        if error or not pcs:
            batch.unwinding_errors += 1
        cs: int = unwinder.sample_callstack(pcs, python_ids) if unwinder is not None else 0
        if cs:
            return cs
        errors = batch.unwinding_errors
        ids, first_loop = self._native_stack(batch, pcs)
        if python_ids and first_loop >= 0:  # the Python frames replace the rest of the stack
            ids = ids[:first_loop] + self._python_stack(batch, python_ids)
        key = b"N" + struct.pack(f"<{len(ids)}Q", *ids)
        cs = self._callstacks.get(key, 0)
        if not cs:
            cs = self._callstacks[key] = len(self._callstacks) + 1
            batch.callstacks.append((cs, tuple(reversed(ids))))
        if unwinder is not None and batch.unwinding_errors == errors:
            unwinder.remember_sample(pcs, python_ids, cs)  # every frame known: the same stack
        return cs

    def _native_stack(self, batch: RecordBatch, pcs: tuple[int, ...]) -> tuple[list[int], int]:
        """The frame ids of a native stack, innermost first, and the index of its innermost
        frame in the interpreter's evaluation loop (-1 when it has none)."""
        cached = self._native_stacks.get(pcs)
        if cached is not None:
            return cached
        frames = [self._native_frame(pc) for pc in pcs]
        # the preload library's own frames, except its malloc hook, are not the program's;
        # nor are the Python client's hooks that pass an allocation on to malloc
        while (
            len(frames) > 1
            and frames[0][1][0].endswith(PRELOAD_LIBRARY)
            and frames[1][1][0].endswith(PRELOAD_LIBRARY)
        ):
            frames.pop(0)
        frames = frames[:1] + [f for f in frames[1:] if CLIENT_HOOKS not in f[1][0]]
        ids = []
        for frame in frames:
            fid = self._native_frames.get(frame)
            if fid is None:
                fid = self._native_frames[frame] = NATIVE_FRAME_BASE + len(self._native_frames)
                batch.native_frames.append((fid, frame))
            ids.append(fid)
        loop = next((i for i, f in enumerate(frames) if f[0] in EVAL_LOOP_FUNCTIONS), -1)
        for pc in pcs:  # later unwinds of samples with Python frames stop in the loop
            if self._native_frame(pc)[0] in EVAL_LOOP_FUNCTIONS:
                self._native.stop_at(pc)
                break
        cached = (ids, loop)
        self._native_stacks[pcs] = cached
        return cached

    def _python_stack(self, batch: RecordBatch, python_ids: bytes) -> list[int]:
        """A native sample's Python frames (innermost first), by their first ids."""
        python = struct.unpack(f"<{len(python_ids) // 8}Q", python_ids)
        if any(fid not in self._frames for fid in python):
            batch.unwinding_errors += 1
        return [self._frames.get(fid, 0) for fid in python]

    def _native_unwinder(self) -> Any:
        """This client's NativeUnwinder, None when libdw is unavailable or cannot attach."""
        if self._native is None and not self._native_failed:
            try:
                from heapprofd._dwunwind import NativeUnwinder

                self._native = NativeUnwinder(self.pid, *self._proc_fds)
                self._native.stop_in(sorted(EVAL_LOOP_FUNCTIONS))
                self._read_maps(module_maps(self._native.maps()))
            except (ImportError, OSError, UnwindError) as exc:  # ImportError: no libdw
                _log.warning("pid %d: cannot unwind native stacks: %s", self.pid, exc)
                self._native_failed = True
        return self._native

    def _reload_maps(self) -> bool:
        """Re-reads the maps; True when they changed (False too when they cannot be read: the
        process has exited)."""
        if self._maps_gone:
            return False
        try:
            text = module_maps(self._native.maps())
            if text == self._maps_text:
                return False
            self._native.report(text)
        except (OSError, UnwindError):
            self._maps_gone = True
            return False
        self._read_maps(text)
        self._native_stacks.clear()  # the unwinder forgot its samples' callstacks too
        self._pc_frames.clear()
        return True

    def _read_maps(self, text: bytes) -> None:
        self._maps_text = text
        maps = []
        for line in text.decode(errors="replace").splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) < 5:
                continue
            start, _, end = parts[0].partition("-")
            maps.append(
                (
                    int(start, 16),
                    int(end, 16),
                    int(parts[2], 16),
                    parts[5].strip() if len(parts) > 5 else "",
                )
            )
        self._maps = sorted(maps)

    def _native_frame(self, pc: int) -> NativeFrame:
        """The frame of a pc, symbolized once per pc while the modules stay the same."""
        frame = self._pc_frames.get(pc)
        if frame is None:
            frame = self._pc_frames[pc] = self._symbolize(pc)
        return frame

    def _symbolize(self, pc: int) -> NativeFrame:
        info = self._native.symbolize(pc)
        function, path, build_id, rel_pc = info if info is not None else ("", "", "", pc)
        index = bisect.bisect_right(self._maps, (pc, 1 << 64)) - 1
        start, end, offset, map_path = (
            self._maps[index] if index >= 0 and self._maps[index][1] > pc else (0, 0, 0, "")
        )
        function = function.partition("@")[0]  # a versioned symbol: name@@VERSION
        if not function and path:  # no symbol covers it (a stripped library): library+offset
            function = f"{os.path.basename(path)}+{rel_pc:#x}"
        return (function, (path or map_path, build_id, start, end, offset), rel_pc)

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
