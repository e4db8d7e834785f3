"""A FileDescriptorSet read with protozero's own decoder, reduced to what the generator needs."""

from __future__ import annotations

from dataclasses import dataclass, field

from protozero._decoder import Field, ProtoDecoder
from protozero._errors import ProtozeroError

# FieldDescriptorProto.Type values.
TYPE_DOUBLE = 1
TYPE_FLOAT = 2
TYPE_INT64 = 3
TYPE_UINT64 = 4
TYPE_INT32 = 5
TYPE_FIXED64 = 6
TYPE_FIXED32 = 7
TYPE_BOOL = 8
TYPE_STRING = 9
TYPE_GROUP = 10
TYPE_MESSAGE = 11
TYPE_BYTES = 12
TYPE_UINT32 = 13
TYPE_ENUM = 14
TYPE_SFIXED32 = 15
TYPE_SFIXED64 = 16
TYPE_SINT32 = 17
TYPE_SINT64 = 18

LABEL_REPEATED = 3


class DescriptorError(ProtozeroError):
    """The descriptor set is malformed or uses something the generator cannot express."""


@dataclass
class FieldDesc:
    """One field of a message."""

    name: str
    number: int
    label: int
    type: int
    type_name: str
    packed_option: bool | None


@dataclass
class EnumDesc:
    """An enum and its values, in declaration order."""

    name: str
    values: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class MessageDesc:
    """A message with its fields, nested messages and nested enums, in declaration order."""

    name: str
    fields: list[FieldDesc] = field(default_factory=list)
    messages: list[MessageDesc] = field(default_factory=list)
    enums: list[EnumDesc] = field(default_factory=list)


@dataclass
class FileDesc:
    """One .proto file of the set."""

    name: str
    package: str = ""
    dependencies: list[str] = field(default_factory=list)
    messages: list[MessageDesc] = field(default_factory=list)
    enums: list[EnumDesc] = field(default_factory=list)
    syntax: str = "proto2"


def _fields(buf: memoryview | bytes, what: str) -> list[Field]:
    decoder = ProtoDecoder(buf)
    fields = list(decoder)
    if decoder.error is not None:
        raise DescriptorError(f"malformed {what}: {decoder.error}")
    return fields


def _string(f: Field, what: str) -> str:
    try:
        return str(f.as_bytes(), "utf-8")
    except UnicodeDecodeError as exc:
        raise DescriptorError(f"{what} is not valid UTF-8") from exc


def _parse_enum(buf: memoryview) -> EnumDesc:
    enum = EnumDesc(name="")
    for f in _fields(buf, "EnumDescriptorProto"):
        if f.id == 1:
            enum.name = _string(f, "enum name")
        elif f.id == 2:
            name = ""
            number = 0
            for v in _fields(f.as_bytes(), "EnumValueDescriptorProto"):
                if v.id == 1:
                    name = _string(v, "enum value name")
                elif v.id == 2:
                    number = v.as_int32()
            enum.values.append((name, number))
    return enum


def _parse_field(buf: memoryview) -> FieldDesc:
    desc = FieldDesc(name="", number=0, label=1, type=0, type_name="", packed_option=None)
    for f in _fields(buf, "FieldDescriptorProto"):
        if f.id == 1:
            desc.name = _string(f, "field name")
        elif f.id == 3:
            desc.number = f.as_int32()
        elif f.id == 4:
            desc.label = f.as_int32()
        elif f.id == 5:
            desc.type = f.as_int32()
        elif f.id == 6:
            desc.type_name = _string(f, "field type name")
        elif f.id == 8:
            for option in _fields(f.as_bytes(), "FieldOptions"):
                if option.id == 2:
                    desc.packed_option = option.as_bool()
    return desc


def _parse_message(buf: memoryview) -> MessageDesc:
    message = MessageDesc(name="")
    for f in _fields(buf, "DescriptorProto"):
        if f.id == 1:
            message.name = _string(f, "message name")
        elif f.id == 2:
            message.fields.append(_parse_field(f.as_bytes()))
        elif f.id == 3:
            message.messages.append(_parse_message(f.as_bytes()))
        elif f.id == 4:
            message.enums.append(_parse_enum(f.as_bytes()))
    return message


def _parse_file(buf: memoryview) -> FileDesc:
    desc = FileDesc(name="")
    for f in _fields(buf, "FileDescriptorProto"):
        if f.id == 1:
            desc.name = _string(f, "file name")
        elif f.id == 2:
            desc.package = _string(f, "package")
        elif f.id == 3:
            desc.dependencies.append(_string(f, "dependency"))
        elif f.id == 4:
            desc.messages.append(_parse_message(f.as_bytes()))
        elif f.id == 5:
            desc.enums.append(_parse_enum(f.as_bytes()))
        elif f.id == 12:
            desc.syntax = _string(f, "syntax")
    return desc


def parse_descriptor_set(data: bytes) -> list[FileDesc]:
    """The files of a serialized FileDescriptorSet, in the set's order."""
    return [_parse_file(f.as_bytes()) for f in _fields(data, "FileDescriptorSet") if f.id == 1]
