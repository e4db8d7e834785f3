"""Writes a sequence's packets straight into the chunk of a perfetto_smb TraceWriter (the
compiled build's).

`ChunkPackets` holds the two C functions the TraceWriter's module hands out as capsules
(`NATIVE_PACKET_API`: reserve a packet, commit it) and the TraceWriter they act on; each
`put` frames a packet of a known size in the chunk and copies its fields there, with no bytes
object in between. `_chunk_packets_pure` is the pure build's, which never binds and always
declines; `_track_event_writer` picks one of them once. Compiled (`_chunk_packets.pxd`) only:
the module works on C pointers and does not run as Python.
"""

from __future__ import annotations

import sys
from typing import Any

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

if cython.compiled:
    from cython.cimports.cpython.long import PyLong_AsLongLongAndOverflow
    from cython.cimports.cpython.pycapsule import PyCapsule_GetPointer
    from cython.cimports.cpython.unicode import PyUnicode_AsUTF8AndSize
    from cython.cimports.libc.string import memcpy
    from cython.cimports.perfetto_client._packet_sink import (
        PACKET_API_COMMIT,
        PACKET_API_RESERVE,
        pc_commit_packet,
        pc_put_bytes,
        pc_reserve_packet,
    )
    from cython.cimports.perfetto_protos.tags.fields_c import (
        DebugAnnotation_bool_value_TAG,
        DebugAnnotation_double_value_TAG,
        DebugAnnotation_int_value_TAG,
        DebugAnnotation_string_value_TAG,
        TracePacket_interned_data_TAG,
        TracePacket_timestamp_TAG,
        TracePacket_track_event_TAG,
        TrackEvent_debug_annotations_TAG,
    )
    from cython.cimports.protozero._varint import put_varint, varint_size

__all__ = ["ChunkPackets", "annotation_size"]


class ChunkPackets:
    """A sequence's way into its TraceWriter's chunk (see the module's docstring).

    `needs_state` is the encoded TrackEvent field that ends every event's packet (its
    sequence flags). Every `put` takes `delta`, the packet's timestamp less the sequence's
    last one, and declines (False, nothing written) where the packet must be assembled as
    bytes and written with `write_packet`: not bound to a TraceWriter, a negative `delta`, or
    a packet the current chunk cannot take with a copy. The caller moves the sequence's last
    timestamp on when a `put` succeeds.
    """

    def __init__(self, needs_state: bytes) -> None:
        self._needs_state = needs_state
        self._sink: object = None
        self._reserve_fn: Any = cython.NULL
        self._commit_fn: Any = cython.NULL
        self._packet_size = 0
        self.bound = False
        """Whether packets can go into a chunk (a `put` may succeed)."""

    def bind(self, sink: object) -> None:
        """Puts packets into `sink`'s chunk from now on if it is a perfetto_smb TraceWriter;
        declines every `put` otherwise (a startup tracing buffer)."""
        self.unbind()
        self._sink = sink
        kind = type(sink)
        module = sys.modules.get(kind.__module__)
        api = getattr(module, "NATIVE_PACKET_API", None)
        if api is not None and kind is getattr(module, "TraceWriter", None):
            self._reserve_fn = PyCapsule_GetPointer(api[0], PACKET_API_RESERVE)
            self._commit_fn = PyCapsule_GetPointer(api[1], PACKET_API_COMMIT)
            self.bound = True

    def unbind(self) -> None:
        """Declines every `put` from now on (the sequence was closed)."""
        self._reserve_fn = cython.NULL
        self._commit_fn = cython.NULL
        self.bound = False

    def put(  # noqa: PLR0917 - positional: the hot paths call it
        self,
        delta: int,
        interned: bytes,
        fields: bytes,
        extra: bytes,
        extra2: bytes,
        extra3: bytes,
        event: bool,
    ) -> bool:
        """Writes a packet holding InternedData body `interned` and `fields`, `extra`,
        `extra2`, `extra3` (with `event`, the fields of a TrackEvent, else already encoded
        packet fields)."""
        body = len(fields) + len(extra) + len(extra2) + len(extra3)
        p = self._open(delta, interned, body, event)
        if p == cython.NULL:
            return False
        p = pc_put_bytes(p, fields)
        p = pc_put_bytes(p, extra)
        p = pc_put_bytes(p, extra2)
        p = pc_put_bytes(p, extra3)
        self._close(p, event)
        return True

    def put_counter(
        self, delta: int, head: bytes, track_field: bytes, tag: bytes, value: int
    ) -> bool:
        """Writes the TrackEvent of a counter point: `head`, `track_field`, then the field of
        tag `tag` holding int64 `value` (its varint encoded in C)."""
        encoded = cython.cast(cython.ulonglong, value)  # a negative value as uint64
        body = len(head) + len(track_field) + len(tag) + varint_size(encoded)
        p = self._open(delta, b"", body, True)
        if p == cython.NULL:
            return False
        p = pc_put_bytes(p, head)
        p = pc_put_bytes(p, track_field)
        p = pc_put_bytes(p, tag)
        p = put_varint(p, encoded)
        self._close(p, True)
        return True

    def put_annotated(
        self,
        delta: int,
        fields: bytes,
        size: int,
        prefixes: tuple[bytes, ...],
        values: tuple[object, ...],
    ) -> bool:
        """Writes a TrackEvent of `fields` then one DebugAnnotation per arg: its name's encoded
        name_iid field `prefixes[i]` and the fields of its value `values[i]`; `size` is the
        annotations' encoded size (the sum of `annotation_size`)."""
        p = self._open(delta, b"", len(fields) + size, True)
        if p == cython.NULL:
            return False
        p = pc_put_bytes(p, fields)
        for i in range(len(prefixes)):
            prefix = prefixes[i]
            value = values[i]
            p[0] = TrackEvent_debug_annotations_TAG
            p = put_varint(p + 1, len(prefix) + _value_size(value))
            p = pc_put_bytes(p, prefix)
            p = _put_value(p, value)
        self._close(p, True)
        return True

    def _open(self, delta: int, interned: bytes, body: int, event: bool) -> Any:
        """Frames a packet in the chunk and writes its timestamp and InternedData body
        `interned`, then (with `event`) a TrackEvent's tag and size; returns where its `body`
        bytes go, written before `_close`. NULL, with nothing written, where it declines."""
        if self._reserve_fn == cython.NULL or delta < 0:
            return cython.NULL
        size = 1 + varint_size(delta) + body
        if interned:
            size += 1 + varint_size(len(interned)) + len(interned)
        if event:
            size += 1 + varint_size(body) + len(self._needs_state)
        p = pc_reserve_packet(self._reserve_fn, self._sink, size)
        if p == cython.NULL:
            return cython.NULL
        p[0] = TracePacket_timestamp_TAG
        p = put_varint(p + 1, delta)
        if interned:
            p[0] = TracePacket_interned_data_TAG
            p = put_varint(p + 1, len(interned))
            p = pc_put_bytes(p, interned)
        if event:
            p[0] = TracePacket_track_event_TAG
            p = put_varint(p + 1, body)
        self._packet_size = size
        return p

    def _close(self, p: Any, event: bool) -> None:
        """Ends the packet `_open` framed, whose body ends at `p` (with `event`, its
        TrackEvent's sequence flags follow), and hands it to the chunk."""
        if event:
            pc_put_bytes(p, self._needs_state)
        pc_commit_packet(self._commit_fn, self._sink, self._packet_size)


def annotation_size(prefix: bytes, value: object) -> int:
    """The encoded size of the TrackEvent.debug_annotations field holding name field `prefix`
    and an int64, bool, float or str `value` (a str encodable without surrogatepass) as
    `_debug_annotations.encode_annotations` encodes it; -1 for any other value."""
    n = _value_size(value)
    if n < 0:
        return -1
    body = len(prefix) + n
    size: int = 1 + varint_size(body) + body
    return size


def _value_size(value: object) -> int:
    """The size of the value fields of an int64, bool, float or str `value`; -1 for others."""
    overflow = 0
    length = 0
    kind = type(value)
    if kind is int:
        number = PyLong_AsLongLongAndOverflow(value, cython.address(overflow))
        if overflow:
            return -1
        size: int = 1 + varint_size(number)
        return size
    if kind is bool:
        return 2
    if kind is float:
        return 9
    if kind is str:
        try:
            PyUnicode_AsUTF8AndSize(value, cython.address(length))
        except UnicodeEncodeError:
            return -1
        total: int = 1 + varint_size(length) + length
        return total
    return -1


def _put_value(p: Any, value: object) -> Any:
    """Writes at `p` the value fields of a value `_value_size` sized; returns the end."""
    overflow = 0
    length = 0
    kind = type(value)
    if kind is int:
        p[0] = DebugAnnotation_int_value_TAG
        return put_varint(p + 1, PyLong_AsLongLongAndOverflow(value, cython.address(overflow)))
    if kind is bool:
        p[0] = DebugAnnotation_bool_value_TAG
        p[1] = 1 if value is True else 0
        return p + 2
    if kind is float:
        p[0] = DebugAnnotation_double_value_TAG  # little-endian, as struct.pack("<d")
        number = value
        memcpy(p + 1, cython.address(number), 8)
        return p + 9
    text = PyUnicode_AsUTF8AndSize(value, cython.address(length))
    p[0] = DebugAnnotation_string_value_TAG
    p = put_varint(p + 1, length)
    memcpy(p, text, length)
    return p + length
