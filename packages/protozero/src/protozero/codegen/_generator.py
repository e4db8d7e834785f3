"""Renders ProtoZero writer modules (`*_pbzero.py`) from parsed descriptors."""

from __future__ import annotations

import keyword
from dataclasses import dataclass

from protozero._message import Message, tag_word
from protozero._proto_utils import (
    WIRE_TYPE_FIXED32,
    WIRE_TYPE_FIXED64,
    WIRE_TYPE_LENGTH_DELIMITED,
    WIRE_TYPE_VARINT,
    encode_tag,
)
from protozero.codegen._descriptors import (
    LABEL_REPEATED,
    TYPE_BOOL,
    TYPE_BYTES,
    TYPE_DOUBLE,
    TYPE_ENUM,
    TYPE_FIXED32,
    TYPE_FIXED64,
    TYPE_FLOAT,
    TYPE_GROUP,
    TYPE_INT32,
    TYPE_INT64,
    TYPE_MESSAGE,
    TYPE_SFIXED32,
    TYPE_SFIXED64,
    TYPE_SINT32,
    TYPE_SINT64,
    TYPE_STRING,
    TYPE_UINT32,
    TYPE_UINT64,
    DescriptorError,
    EnumDesc,
    FieldDesc,
    FileDesc,
    MessageDesc,
)

LINE_LENGTH = 100
INDENT = "    "

# The private modules generated code takes its internals from.
_MESSAGE = "protozero._message"
_PROTO_UTILS = "protozero._proto_utils"

# proto type -> (put_* suffix, wire type, Python type of one value)
_SCALARS: dict[int, tuple[str, int, str]] = {
    TYPE_INT32: ("varint", WIRE_TYPE_VARINT, "int"),
    TYPE_INT64: ("varint", WIRE_TYPE_VARINT, "int"),
    TYPE_UINT32: ("varint", WIRE_TYPE_VARINT, "int"),
    TYPE_UINT64: ("varint", WIRE_TYPE_VARINT, "int"),
    TYPE_ENUM: ("varint", WIRE_TYPE_VARINT, "int"),
    TYPE_BOOL: ("varint", WIRE_TYPE_VARINT, "bool"),
    TYPE_SINT32: ("zigzag", WIRE_TYPE_VARINT, "int"),
    TYPE_SINT64: ("zigzag", WIRE_TYPE_VARINT, "int"),
    TYPE_FIXED32: ("fixed32", WIRE_TYPE_FIXED32, "int"),
    TYPE_SFIXED32: ("fixed32", WIRE_TYPE_FIXED32, "int"),
    TYPE_FIXED64: ("fixed64", WIRE_TYPE_FIXED64, "int"),
    TYPE_SFIXED64: ("fixed64", WIRE_TYPE_FIXED64, "int"),
    TYPE_FLOAT: ("float", WIRE_TYPE_FIXED32, "float"),
    TYPE_DOUBLE: ("double", WIRE_TYPE_FIXED64, "float"),
    TYPE_STRING: ("string", WIRE_TYPE_LENGTH_DELIMITED, "str | bytes"),
    TYPE_BYTES: ("bytes", WIRE_TYPE_LENGTH_DELIMITED, "bytes | bytearray | memoryview"),
}
_NOT_PACKABLE = {TYPE_STRING, TYPE_BYTES, TYPE_MESSAGE, TYPE_GROUP}
_RESERVED = frozenset(dir(Message))


@dataclass(frozen=True)
class _TypeRef:
    proto_file: str
    path: str


def module_path(proto_name: str, strip_prefix: str) -> str:
    """`perfetto/trace/trace_packet.proto` -> `trace/trace_packet_pbzero.py` (prefix stripped)."""
    stem = proto_name[len(strip_prefix) :].removesuffix(".proto")
    return f"{stem}_pbzero.py"


def _module_import(proto_name: str, strip_prefix: str, package: str) -> str:
    dotted = module_path(proto_name, strip_prefix).removesuffix(".py").replace("/", ".")
    return f"{package}.{dotted}" if package else dotted


def _index_types(files: list[FileDesc]) -> dict[str, _TypeRef]:
    index: dict[str, _TypeRef] = {}

    def visit(proto_file: str, scope: str, path: str, message: MessageDesc) -> None:
        full = f"{scope}.{message.name}"
        index[full] = _TypeRef(proto_file, f"{path}{message.name}")
        for nested in message.messages:
            visit(proto_file, full, f"{path}{message.name}.", nested)
        for enum in message.enums:
            index[f"{full}.{enum.name}"] = _TypeRef(proto_file, f"{path}{message.name}.{enum.name}")

    for f in files:
        scope = f".{f.package}" if f.package else ""
        for message in f.messages:
            visit(f.name, scope, "", message)
        for enum in f.enums:
            index[f"{scope}.{enum.name}"] = _TypeRef(f.name, enum.name)
    return index


def _identifier(name: str) -> str:
    return f"{name}_" if keyword.iskeyword(name) or keyword.issoftkeyword(name) else name


def _call_lines(indent: str, head: str, args: list[str], tail: str) -> list[str]:
    """`head(args)tail` laid out the way ruff format lays out a call or a signature."""
    one_line = f"{indent}{head}{', '.join(args)}{tail}"
    if len(one_line) <= LINE_LENGTH:
        return [one_line]
    inner = indent + INDENT
    hugged = f"{inner}{', '.join(args)}"
    if len(args) == 1 and head.startswith("def "):
        hugged += ","
    if len(hugged) <= LINE_LENGTH:
        return [f"{indent}{head}", hugged, f"{indent}{tail}"]
    return [f"{indent}{head}", *(f"{inner}{a}," for a in args), f"{indent}{tail}"]


def _compiled_lines(body: str, call: str) -> list[str]:
    """The compiled build's path: one call into the compiled `Message` does the whole write."""
    return [f"{body}if _COMPILED:", f"{body}{INDENT}{call}", f"{body}{INDENT}return"]


def _condition_lines(indent: str, conditions: list[str]) -> list[str]:
    """An `if` over `conditions` joined with `and`, laid out the way ruff format does."""
    one_line = f"{indent}if {' and '.join(conditions)}:"
    if len(one_line) <= LINE_LENGTH:
        return [one_line]
    inner = indent + INDENT
    return [
        f"{indent}if (",
        f"{inner}{conditions[0]}",
        *(f"{inner}and {c}" for c in conditions[1:]),
        f"{indent}):",
    ]


def _tag_store_lines(indent: str, tag: bytes) -> list[str]:
    lines = [f"{indent}buf[p] = 0x{tag[0]:02X}"]
    lines += [f"{indent}buf[p + {i}] = 0x{b:02X}" for i, b in enumerate(tag) if i]
    return lines


def _inline_varint(body: str, tag: bytes, *, zigzag: bool) -> list[str]:
    """A varint setter whose fast path writes straight into the stream writer's buffer.

    Interpreted, the value's bytes come from protozero's varint tables (at most four lookups
    and one slice store). When protozero runs compiled, one `put_varint` call does it all.
    """
    inner = body + INDENT
    deeper = inner + INDENT
    word = int.from_bytes(tag, "little")
    lines = [f"{body}value = (value << 1) ^ (value >> 63)"] if zigzag else []
    lines += _compiled_lines(body, f"self.put_varint(0x{word:02X}, value)")
    lines += [f"{body}w = self.stream_writer", f"{body}p = w.write_ptr"]
    lines += _condition_lines(
        body, [f"p + {len(tag) + 8} <= w.end", "0 <= value < 0x100_0000_0000_0000"]
    )
    lines += [
        f"{inner}buf = w.buffer",
        *_tag_store_lines(inner, tag),
        f"{inner}if value < 0x80:",
        f"{deeper}buf[p + {len(tag)}] = value",
        f"{deeper}w.write_ptr = p + {len(tag) + 1}",
        f"{deeper}return",
        f"{inner}if value < 0x4000:",
        f"{deeper}data = _VARINTS[value]",
        f"{inner}elif value < 0x1000_0000:",
        f"{deeper}data = _PAIRS[value & 0x3FFF] + _VARINTS[value >> 14]",
        f"{inner}elif value < 0x400_0000_0000:",
        f"{deeper}data = _PAIRS[value & 0x3FFF] + _PAIRS[(value >> 14) & 0x3FFF]",
        f"{deeper}data += _VARINTS[value >> 28]",
        f"{inner}else:",
        f"{deeper}data = _PAIRS[value & 0x3FFF] + _PAIRS[(value >> 14) & 0x3FFF]",
        f"{deeper}data += _PAIRS[(value >> 28) & 0x3FFF] + _VARINTS[value >> 42]",
        f"{inner}p += {len(tag)}",
        f"{inner}q = p + len(data)",
        f"{inner}buf[p:q] = data",
        f"{inner}w.write_ptr = q",
        f"{body}else:",
        f"{inner}self.put_varint(0x{word:02X}, value)",
    ]
    return lines


def _begin_lines(body: str, tag: bytes, cls: str) -> list[str]:
    """A nested-message starter whose fast path writes the tag and reserves the size in place."""
    inner = body + INDENT
    word = int.from_bytes(tag, "little")
    return [
        f"{body}if _COMPILED:",
        *_call_lines(body + INDENT, "return self.begin_nested(", [f"0x{word:02X}", cls], ")"),
        f"{body}w = self.stream_writer",
        f"{body}p = w.write_ptr",
        f"{body}if p + {len(tag) + 4} <= w.end:",
        f"{inner}buf = w.buffer",
        *_tag_store_lines(inner, tag),
        f"{inner}w.write_ptr = p + {len(tag) + 4}",
        *_call_lines(inner, f"child = {cls}(", ["w", f"p + {len(tag)}"], ")"),
        f"{inner}self.nested_message = child",
        f"{inner}self.stream_writer = _SUSPENDED",
        f"{inner}return child",
        *_call_lines(body, "return self.begin_nested(", [f"0x{word:02X}", cls], ")"),
    ]


def _inline_bytes(body: str, tag: bytes, *, encode: bool) -> list[str]:
    """A string/bytes setter whose fast path stores tag, length and value with one store."""
    inner = body + INDENT
    word = int.from_bytes(tag, "little")
    literal = 'b"' + "".join(f"\\x{b:02x}" for b in tag) + '"'
    if encode:
        lines = _compiled_lines(body, f"self.put_string(0x{word:02X}, value)")
        lines += [f"{body}data = value.encode() if isinstance(value, str) else value"]
    else:
        lines = _compiled_lines(body, f"self.put_bytes(0x{word:02X}, value)")
        lines += [f"{body}data = value"]
    lines += [f"{body}n = len(data)", f"{body}w = self.stream_writer", f"{body}p = w.write_ptr"]
    lines += _condition_lines(body, ["n < 0x4000", f"p + {len(tag) + 2} + n <= w.end"])
    lines += [
        f"{inner}data = {literal} + _VARINTS[n] + data",
        f"{inner}q = p + len(data)",
        f"{inner}w.buffer[p:q] = data",
        f"{inner}w.write_ptr = q",
        f"{body}else:",
        f"{inner}self.put_bytes(0x{word:02X}, data)",
    ]
    return lines


class _FileRenderer:
    def __init__(
        self, desc: FileDesc, index: dict[str, _TypeRef], strip_prefix: str, package: str
    ) -> None:
        self._desc = desc
        self._index = index
        self._strip_prefix = strip_prefix
        self._package = package
        self._imports: dict[str, str] = {}
        self._uses_iterable = False
        self._uses_int_enum = False
        self._uses_varint_fast_path = False
        self._uses_varint_tables = False
        self._uses_begin = False

    def _alias_for(self, proto_file: str) -> str:
        if proto_file not in self._imports:
            base = module_path(proto_file, self._strip_prefix).removesuffix(".py").split("/")[-1]
            alias = f"_{base}"
            taken = set(self._imports.values())
            n = 2
            while alias in taken:
                alias = f"_{base}{n}"
                n += 1
            self._imports[proto_file] = alias
        return self._imports[proto_file]

    def _message_type(self, field: FieldDesc) -> str:
        ref = self._index.get(field.type_name)
        if ref is None:
            raise DescriptorError(f"field {field.name}: unknown type {field.type_name}")
        if ref.proto_file == self._desc.name:
            return ref.path
        if not ref.proto_file.startswith(self._strip_prefix):
            return "Message"
        return f"{self._alias_for(ref.proto_file)}.{ref.path}"

    def _is_packed(self, field: FieldDesc) -> bool:
        if field.label != LABEL_REPEATED or field.type in _NOT_PACKABLE:
            return False
        if field.packed_option is not None:
            return field.packed_option
        return self._desc.syntax == "proto3"

    def _enum_lines(self, enum: EnumDesc, indent: str, full_name: str) -> list[str]:
        self._uses_int_enum = True
        body = indent + INDENT
        lines = [f"{indent}class {enum.name}(IntEnum):", f'{body}"""{full_name}."""', ""]
        lines += [f"{body}{_identifier(name)} = {number}" for name, number in enum.values]
        return lines

    def _field_lines(self, field: FieldDesc, indent: str) -> list[str]:
        name = field.name.lower()
        body = indent + INDENT
        repeated = field.label == LABEL_REPEATED
        if field.type == TYPE_MESSAGE:
            cls = self._message_type(field)
            method = f"{'add' if repeated else 'begin'}_{name}"
            self._uses_begin = True
            return [
                *_call_lines(indent, f"def {method}(", ["self"], f") -> {cls}:"),
                *_begin_lines(body, encode_tag(field.number, WIRE_TYPE_LENGTH_DELIMITED), cls),
            ]
        if field.type not in _SCALARS:
            raise DescriptorError(f"field {field.name}: unsupported type {field.type}")
        kind, wire_type, py_type = _SCALARS[field.type]
        if self._is_packed(field):
            self._uses_iterable = True
            tag = tag_word(field.number, WIRE_TYPE_LENGTH_DELIMITED)
            packed_kind = "varints" if kind == "varint" else kind
            params = ["self", f"values: Iterable[{py_type}]"]
            return [
                *_call_lines(indent, f"def set_{name}_packed(", params, ") -> None:"),
                f"{body}self.put_packed_{packed_kind}(0x{tag:02X}, values)",
            ]
        tag = tag_word(field.number, wire_type)
        method = f"{'add' if repeated else 'set'}_{name}"
        params = ["self", f"value: {py_type}"]
        signature = _call_lines(indent, f"def {method}(", params, ") -> None:")
        tag_bytes = encode_tag(field.number, wire_type)
        if kind in ("varint", "zigzag") and py_type == "int":
            self._uses_varint_fast_path = True
            self._uses_varint_tables = True
            return [*signature, *_inline_varint(body, tag_bytes, zigzag=kind == "zigzag")]
        if kind in ("string", "bytes"):
            self._uses_varint_tables = True
            return [*signature, *_inline_bytes(body, tag_bytes, encode=kind == "string")]
        return [*signature, f"{body}self.put_{kind}(0x{tag:02X}, value)"]

    def _message_lines(self, message: MessageDesc, indent: str, full_name: str) -> list[str]:
        body = indent + INDENT
        lines = [
            f"{indent}class {message.name}(Message):",
            f'{body}"""{full_name}."""',
            "",
            f"{body}__slots__ = ()",
        ]
        names: set[str] = set()

        def claim(name: str) -> None:
            if name in names or name in _RESERVED:
                raise DescriptorError(f"{full_name}: generated name {name!r} is ambiguous")
            names.add(name)

        for nested in message.messages:
            claim(nested.name)
            lines += ["", *self._message_lines(nested, body, f"{full_name}.{nested.name}")]
        for enum in message.enums:
            claim(enum.name)
            lines += ["", *self._enum_lines(enum, body, f"{full_name}.{enum.name}")]
        constants: list[str] = []
        for enum in message.enums:
            for value_name, number in enum.values:
                claim(_identifier(value_name))
                constants.append(f"{body}{_identifier(value_name)} = {number}")
        for field in message.fields:
            claim(f"FIELD_{field.name.upper()}")
            constants.append(f"{body}FIELD_{field.name.upper()} = {field.number}")
        if constants:
            lines += ["", *constants]
        for field in message.fields:
            field_lines = self._field_lines(field, body)
            claim(field_lines[0].strip().split("(")[0].removeprefix("def "))
            lines += ["", *field_lines]
        return lines

    def render(self) -> str:
        scope = f"{self._desc.package}." if self._desc.package else ""
        blocks: list[list[str]] = []
        for enum in self._desc.enums:
            blocks.append(self._enum_lines(enum, "", f"{scope}{enum.name}"))
            constants = [f"{_identifier(n)} = {v}" for n, v in enum.values]
            blocks.append(constants)
        for message in self._desc.messages:
            blocks.append(self._message_lines(message, "", f"{scope}{message.name}"))
        header = [
            f'"""ProtoZero writers for {self._desc.name}.',
            "",
            "Generated by protozero.codegen; do not edit.",
            '"""',
            "",
            "from __future__ import annotations",
        ]
        stdlib = []
        if self._uses_iterable:
            stdlib.append("from collections.abc import Iterable")
        if self._uses_int_enum:
            stdlib.append("from enum import IntEnum")
        sections = [stdlib]
        protozero_imports = []
        if self._uses_varint_tables or self._uses_begin:
            protozero_imports.append("from protozero import COMPILED as _COMPILED")
        if self._desc.messages:
            protozero_imports.append("from protozero import Message")
        if self._uses_begin:
            protozero_imports.append(f"from {_MESSAGE} import SUSPENDED_WRITER as _SUSPENDED")
        if self._uses_varint_tables:
            protozero_imports.append(f"from {_PROTO_UTILS} import SHORT_VARINTS as _VARINTS")
        if self._uses_varint_fast_path:
            protozero_imports.append(f"from {_PROTO_UTILS} import VARINT_PAIRS as _PAIRS")
        sections.append(protozero_imports)
        sections.append(self._import_lines())
        for section in sections:
            if section:
                header += ["", *section]
        out = header
        for block in blocks:
            out += ["", "", *block]
        return "\n".join(out) + "\n"

    def _import_lines(self) -> list[str]:
        imports = []
        for proto_file, alias in self._imports.items():
            module = _module_import(proto_file, self._strip_prefix, self._package)
            parent, _, leaf = module.rpartition(".")
            if parent:
                imports.append(f"from {parent} import {leaf} as {alias}")
            else:
                imports.append(f"import {leaf} as {alias}")
        lines: list[str] = []
        for line in sorted(imports, key=_isort_key):
            if len(line) <= LINE_LENGTH:
                lines.append(line)
            else:
                head, _, names = line.partition(" import ")
                lines += [f"{head} import (", f"{INDENT}{names},", ")"]
        return lines


def _isort_key(line: str) -> tuple[str, str]:
    words = line.split()
    return (words[1].lower(), words[3].lower() if len(words) > 3 else "")


def generate(files: list[FileDesc], strip_prefix: str, package: str) -> dict[str, str]:
    """Source text of every `*_pbzero.py` module, by path relative to the output directory."""
    index = _index_types(files)
    out: dict[str, str] = {}
    for desc in files:
        if desc.name.startswith(strip_prefix):
            path = module_path(desc.name, strip_prefix)
            out[path] = _FileRenderer(desc, index, strip_prefix, package).render()
    return out
