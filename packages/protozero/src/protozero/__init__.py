"""Append-only zero-copy protobuf writer, decoder and code generator."""

from typing import TYPE_CHECKING, Any

from protozero import _native

_native.select_build(__name__)

from protozero._decoder import Field, PackedRepeated, ProtoDecoder, read_varint
from protozero._errors import ProtozeroError
from protozero._heap_buffered import HeapBuffered
from protozero._message import COMPILED, MAX_ONE_BYTE_MESSAGE_LENGTH, Message, tag_word
from protozero._proto_utils import (
    WIRE_TYPE_FIXED32,
    WIRE_TYPE_FIXED64,
    WIRE_TYPE_LENGTH_DELIMITED,
    WIRE_TYPE_VARINT,
    WritableBuffer,
    encode_tag,
    encode_varint,
    varint_size,
    write_redundant_varint,
)
from protozero._scattered_stream_writer import ScatteredStreamWriter, ScatteredStreamWriterDelegate

_native.report(__name__)

__all__ = [
    "COMPILED",
    "MAX_ONE_BYTE_MESSAGE_LENGTH",
    "WIRE_TYPE_FIXED32",
    "WIRE_TYPE_FIXED64",
    "WIRE_TYPE_LENGTH_DELIMITED",
    "WIRE_TYPE_VARINT",
    "Field",
    "HeapBuffered",
    "Message",
    "PackedRepeated",
    "ProtoDecoder",
    "ProtozeroError",
    "ScatteredStreamWriter",
    "ScatteredStreamWriterDelegate",
    "WritableBuffer",
    "__version__",
    "encode_tag",
    "encode_varint",
    "read_varint",
    "tag_word",
    "varint_size",
    "write_redundant_varint",
]


if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> Any:
        if name != "__version__":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib.metadata import version  # costs as much as the package: only when asked

        globals()["__version__"] = value = version("perfetto-protozero")
        return value
