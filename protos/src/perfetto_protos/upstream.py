"""Upstream Perfetto's published schema, as a test oracle and tooling aid.

Upstream's PyPI package `perfetto` ships the whole trace schema as
`perfetto/protos/perfetto/trace/perfetto_trace_pb2.py`. This module reads that file's
serialized descriptor without importing it and loads it into a private `DescriptorPool`, so
checking our output against upstream's schema works whatever else the process imported.

Needs the `perfetto` package (a development dependency); every function raises
`ProtosError` with a clear message when it is absent.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import descriptor_pool, message, message_factory
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor, FileDescriptor

from perfetto_protos._errors import ProtosError

__all__ = [
    "parse_upstream_trace",
    "schema_mismatches",
    "upstream_message_class",
    "upstream_pool",
]

_SCHEMA_FILE = ("protos", "perfetto", "trace", "perfetto_trace_pb2.py")


def _schema_path() -> Path:
    spec = importlib.util.find_spec("perfetto")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location).joinpath(*_SCHEMA_FILE)
        if path.is_file():
            return path
    raise ProtosError(
        "upstream's schema is unavailable: install the `perfetto` package from PyPI "
        "(it ships perfetto/protos/perfetto/trace/perfetto_trace_pb2.py)"
    )


def _serialized_files(source: str, path: Path) -> list[bytes]:
    """The bytes literals passed to `AddSerializedFile(...)` in a generated `_pb2.py`."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ProtosError(f"cannot parse {path}: {exc}") from exc
    found = [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "AddSerializedFile"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, bytes)
    ]
    if not found:
        raise ProtosError(f"no serialized file descriptor found in {path}")
    return found


@functools.cache
def upstream_pool() -> descriptor_pool.DescriptorPool:
    """A private descriptor pool holding upstream's published trace schema."""
    path = _schema_path()
    pool = descriptor_pool.DescriptorPool()
    for serialized in _serialized_files(path.read_text(encoding="utf-8"), path):
        try:
            pool.AddSerializedFile(serialized)
        except (TypeError, ValueError) as exc:
            raise ProtosError(f"upstream's schema in {path} does not load: {exc}") from exc
    return pool


def upstream_message_class(full_name: str) -> type[message.Message]:
    """Upstream's message class for `full_name`, e.g. `"perfetto.protos.TracePacket"`."""
    try:
        desc = upstream_pool().FindMessageTypeByName(full_name)
    except KeyError as exc:
        raise ProtosError(f"upstream's schema has no message {full_name!r}") from exc
    return message_factory.GetMessageClass(desc)


def parse_upstream_trace(data: bytes) -> message.Message:
    """Parses a trace file's bytes as upstream's `perfetto.protos.Trace`."""
    trace = upstream_message_class("perfetto.protos.Trace")()
    try:
        trace.ParseFromString(data)
    except message.DecodeError as exc:
        raise ProtosError(f"not a valid trace for upstream's schema: {exc}") from exc
    return trace


def _label(field: FieldDescriptor) -> str:
    if field.is_repeated:
        return "repeated"
    return "required" if field.is_required else "optional"


def _type_name(field: FieldDescriptor) -> str:
    if field.message_type is not None:
        return field.message_type.full_name
    if field.enum_type is not None:
        return field.enum_type.full_name
    return ""


def _field_shape(field: FieldDescriptor) -> dict[str, object]:
    oneof = field.containing_oneof
    return {
        "number": field.number,
        "type": field.type,
        "label": _label(field),
        "type_name": _type_name(field),
        "oneof": oneof.name if oneof is not None else None,
        "packed": field.is_packed,
    }


def _enum_mismatches(ours: EnumDescriptor, theirs: EnumDescriptor) -> list[str]:
    problems = []
    for value in ours.values:
        other = theirs.values_by_name.get(value.name)
        if other is None:
            problems.append(f"{ours.full_name}.{value.name}: no such value upstream")
        elif other.number != value.number:
            problems.append(
                f"{ours.full_name}.{value.name}: value {value.number}, upstream {other.number}"
            )
    return problems


def _message_mismatches(ours: Descriptor, theirs: Descriptor) -> list[str]:
    problems = []
    for field in ours.fields:
        other = theirs.fields_by_name.get(field.name)
        if other is None:
            problems.append(f"{field.full_name}: no such field upstream")
            continue
        mine, upstream = _field_shape(field), _field_shape(other)
        problems += [
            f"{field.full_name}: {key} {mine[key]!r}, upstream {upstream[key]!r}"
            for key in mine
            if mine[key] != upstream[key]
        ]
    return problems


def _walk(
    messages: Iterable[Descriptor], enums: Iterable[EnumDescriptor]
) -> Iterable[Descriptor | EnumDescriptor]:
    yield from enums
    for desc in messages:
        yield desc
        yield from _walk(desc.nested_types, desc.enum_types)


def schema_mismatches(
    files: Iterable[FileDescriptor], reference: descriptor_pool.DescriptorPool | None = None
) -> list[str]:
    """Every way in which the messages and enums of `files` disagree with a reference schema.

    Only types that the reference (upstream's schema by default) also defines are compared.
    For each field we define: upstream must have a field of that name with the same number,
    type, label, message/enum type name, oneof and packedness. For each enum value we define:
    upstream must have it with the same number. Returns one line per mismatch.
    """
    pool = upstream_pool() if reference is None else reference
    problems: list[str] = []
    for file in files:
        for desc in _walk(file.message_types_by_name.values(), file.enum_types_by_name.values()):
            if isinstance(desc, Descriptor):
                try:
                    other_message = pool.FindMessageTypeByName(desc.full_name)
                except KeyError:
                    continue
                problems += _message_mismatches(desc, other_message)
            else:
                try:
                    other_enum = pool.FindEnumTypeByName(desc.full_name)
                except KeyError:
                    continue
                problems += _enum_mismatches(desc, other_enum)
    return problems
