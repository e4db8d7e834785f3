"""Debug annotations: keyword arguments of an event encoded as DebugAnnotation messages."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

try:
    import cython
except ImportError:  # installed without Cython: runs as pure Python
    from protozero import _cython_shim as cython

from perfetto_client import _track_event_writer as _encoders
from perfetto_client._track_event_writer import (
    TrackEventWriter,
    intern_debug_annotation_name,
    varint,
)

if not cython.compiled:  # compiled, _debug_annotations.pxd cimports it from _chunk_packets
    from perfetto_client._chunk_packets_pure import annotation_size

__all__ = ["Traceable", "encode_annotations", "put_annotated_event"]

_ANNOTATION = b"\x22"  # TrackEvent.debug_annotations (4)
_NAME_IID = b"\x08"  # DebugAnnotation.name_iid (1)
_BOOL = b"\x10"  # DebugAnnotation.bool_value (2)
_UINT = b"\x18"  # DebugAnnotation.uint_value (3)
_INT = b"\x20"  # DebugAnnotation.int_value (4)
_DOUBLE = b"\x29"  # DebugAnnotation.double_value (5, fixed64)
_STRING = b"\x32"  # DebugAnnotation.string_value (6)
_NAME = b"\x52"  # DebugAnnotation.name (10)
_DICT_ENTRY = b"\x5a"  # DebugAnnotation.dict_entries (11)
_ARRAY_VALUE = b"\x62"  # DebugAnnotation.array_values (12)
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1
_MAX_DEPTH = 32
# An empty dict or list has no entries to carry its type: say it with the NestedValue form
# (nested_value = 8, NestedValue.nested_type = DICT (1) or ARRAY (2)).
_EMPTY_DICT = b"\x42\x02\x08\x01"  # DebugAnnotation.nested_value: nested_type DICT
_EMPTY_ARRAY = b"\x42\x02\x08\x02"  # DebugAnnotation.nested_value: nested_type ARRAY


@runtime_checkable
class Traceable(Protocol):
    """An object that says how it appears as an event argument.

    `__perfetto_trace__` returns what to record instead of the object: a bool, int, float,
    str, bytes, None, or a dict/list/tuple of those (nested as deep as needed).
    """

    def __perfetto_trace__(self) -> object:
        """The value recorded for this object."""


def _str(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    return _STRING + varint(len(data)) + data


def _value(value: object, depth: int) -> bytes:
    """The value fields of a DebugAnnotation holding `value`."""
    kind = type(value)
    if kind is str:
        return _str(value)  # type: ignore[arg-type]
    if kind is int:
        number: int = value  # type: ignore[assignment]
        if 0 <= number <= _INT64_MAX:
            return _INT + varint(number)
        if _INT64_MIN <= number < 0:
            return _INT + varint(number & _UINT64_MAX)
        if _INT64_MAX < number <= _UINT64_MAX:
            return _UINT + varint(number)
        return _str(str(number))
    if kind is bool:
        return _BOOL + (b"\x01" if value else b"\x00")
    if kind is float:
        return _DOUBLE + struct.pack("<d", value)
    if value is None:
        return _str("None")
    if depth >= _MAX_DEPTH:
        return _str(repr(value))
    if isinstance(value, Mapping):
        if not value:
            return _EMPTY_DICT
        out = b""
        for key, item in value.items():
            name = str(key).encode("utf-8", "surrogatepass")
            entry = _NAME + varint(len(name)) + name + _value(item, depth + 1)
            out += _DICT_ENTRY + varint(len(entry)) + entry
        return out
    if isinstance(value, list | tuple):
        if not value:
            return _EMPTY_ARRAY
        out = b""
        for item in value:
            entry = _value(item, depth + 1)
            out += _ARRAY_VALUE + varint(len(entry)) + entry
        return out
    if isinstance(value, bytes | bytearray | memoryview):
        return _str(repr(bytes(value)))
    if isinstance(value, Traceable):
        return _value(value.__perfetto_trace__(), depth + 1)
    if isinstance(value, bool):
        return _BOOL + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return _value(int(value), depth)
    if isinstance(value, float):
        return _value(float(value), depth)
    if isinstance(value, str):
        return _str(str(value))
    return _str(repr(value))


_name_fields: dict[str, tuple[bytes, int, bytes]] = {}
"""Annotation name -> (encoded DebugAnnotation.name_iid field, iid, the encoded annotation
up to the one-byte varint of an int value below 128)."""


def encode_annotations(args: dict[str, object]) -> tuple[bytes, list[int]]:
    """TrackEvent.debug_annotations fields for `args`, and the annotation name iids they use."""
    pieces: list[bytes] = []
    iids: list[int] = []
    short = _encoders.SHORT_VARINTS
    for name, value in args.items():
        found = _name_fields.get(name)
        if found is None:
            iid = intern_debug_annotation_name(name)
            name_field = _NAME_IID + varint(iid)
            found = _name_fields[name] = (
                name_field,
                iid,
                _ANNOTATION + varint(len(name_field) + 2) + name_field + _INT,
            )
        prefix, iid, small_int_head = found
        iids.append(iid)
        if type(value) is int and 0 <= value < 128:
            pieces.append(small_int_head)
            pieces.append(short[value])
            continue
        encoded = _value(value, 0)
        size = len(prefix) + len(encoded)
        pieces.append(_ANNOTATION)
        pieces.append(short[size] if size < 16384 else varint(size))
        pieces.append(prefix)
        pieces.append(encoded)
    return b"".join(pieces), iids


def put_annotated_event(  # noqa: PLR0917 - positional: Slice.__enter__ calls it per event
    writer: TrackEventWriter,
    key: int,
    event_type: int,
    ts: int,
    names: tuple[str, ...],
    values: tuple[object, ...],
) -> bool:
    """Writes the event of `key` and `event_type` at `ts` on the thread's track with the args
    of names `names` and values `values` straight into `writer`'s chunk (compiled:
    `_chunk_packets`), each arg encoded there as `encode_annotations` encodes it.

    False, with nothing written, where the event must take the general path: the pure build,
    a sequence that is not a plain TrackEventWriter or whose state was cleared, an event or
    arg name not yet emitted on the sequence, an arg that is not an int64, bool, float or
    str, or a packet the chunk cannot take with a copy.
    """
    if type(writer) is not TrackEventWriter or writer.cleared:
        return False
    chunk = writer._chunk
    if not chunk.bound:
        return False
    fields = writer._heads.get(key << 3 | event_type)
    if fields is None:
        return False
    prefixes = writer._annotation_prefixes.get(names)
    if prefixes is None:
        prefixes = _emitted_prefixes(writer, names)
        if prefixes is None:
            return False
    size = 0
    for i in range(len(names)):
        n = annotation_size(prefixes[i], values[i])
        if n < 0:
            return False
        size += n
    if chunk.put_annotated(ts - writer.last_ts, fields, size, prefixes, values):
        writer.last_ts = ts
        return True
    return False


MAX_CACHED_NAME_TUPLES = 1024
"""How many args' name tuples a sequence keeps the encoded names of."""


def _emitted_prefixes(writer: TrackEventWriter, names: tuple[str, ...]) -> tuple[bytes, ...] | None:
    """The encoded name_iid fields of `names`, remembered by `writer`; None unless each name
    was emitted on its sequence."""
    emitted = writer._emitted_annotation_names
    prefixes = []
    for name in names:
        found = _name_fields.get(name)
        if found is None or found[1] not in emitted:
            return None
        prefixes.append(found[0])
    out = tuple(prefixes)
    if len(writer._annotation_prefixes) < MAX_CACHED_NAME_TUPLES:
        writer._annotation_prefixes[names] = out
    return out
