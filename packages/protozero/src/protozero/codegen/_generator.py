"""Renders ProtoZero writer modules (`*_pbzero.py`) from parsed descriptors."""

from __future__ import annotations

import fnmatch
import keyword
from collections.abc import Collection
from dataclasses import dataclass

from protozero._message import Message, tag_word
from protozero._proto_utils import (
    WIRE_TYPE_FIXED32,
    WIRE_TYPE_FIXED64,
    WIRE_TYPE_LENGTH_DELIMITED,
    WIRE_TYPE_START_GROUP,
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
_SET_FIELDS = "set_fields"
"""The compiled writers' method that sets several scalar fields in one call."""
_RESERVED = frozenset(dir(Message))


def is_packed(field: FieldDesc, syntax: str) -> bool:
    """Whether a repeated field is written packed (proto3's default, proto2's `packed` option)."""
    if field.label != LABEL_REPEATED or field.type in _NOT_PACKABLE:
        return False
    if field.packed_option is not None:
        return field.packed_option
    return syntax == "proto3"


def field_wire_type(field: FieldDesc, syntax: str) -> int:
    """The wire type a field is written with."""
    if is_packed(field, syntax):
        return WIRE_TYPE_LENGTH_DELIMITED
    if field.type == TYPE_GROUP:
        return WIRE_TYPE_START_GROUP
    if field.type == TYPE_MESSAGE:
        return WIRE_TYPE_LENGTH_DELIMITED
    return _SCALARS[field.type][1]


@dataclass(frozen=True)
class _TypeRef:
    proto_file: str
    name: str  # the module-level name of its class: `TrackEvent_LegacyEvent`


def _local_name(path: list[str]) -> str:
    """The module-level name of a message or enum class. A nested one is defined at module
    level under upstream's C++ name (`TrackEvent_LegacyEvent`: Cython compiles no class inside
    a `cdef class`) and its parent names it too (`TrackEvent.LegacyEvent`)."""
    return "_".join(path)


def module_path(proto_name: str, strip_prefix: str) -> str:
    """`perfetto/trace/trace_packet.proto` -> `trace/trace_packet_pbzero.py` (prefix stripped)."""
    stem = proto_name[len(strip_prefix) :].removesuffix(".proto")
    return f"{stem}_pbzero.py"


def _module_import(proto_name: str, strip_prefix: str, package: str) -> str:
    dotted = module_path(proto_name, strip_prefix).removesuffix(".py").replace("/", ".")
    return f"{package}.{dotted}" if package else dotted


def _index_types(files: list[FileDesc]) -> dict[str, _TypeRef]:
    index: dict[str, _TypeRef] = {}

    def visit(proto_file: str, scope: str, path: list[str], message: MessageDesc) -> None:
        full = f"{scope}.{message.name}"
        own = [*path, message.name]
        index[full] = _TypeRef(proto_file, _local_name(own))
        for nested in message.messages:
            visit(proto_file, full, own, nested)
        for enum in message.enums:
            index[f"{full}.{enum.name}"] = _TypeRef(proto_file, _local_name([*own, enum.name]))

    for f in files:
        scope = f".{f.package}" if f.package else ""
        for message in f.messages:
            visit(f.name, scope, [], message)
        for enum in f.enums:
            index[f"{scope}.{enum.name}"] = _TypeRef(f.name, enum.name)
    return index


def _identifier(name: str) -> str:
    """`name`, with `_` appended if it is a keyword. Soft keywords (`match`, `type`, ...) are
    valid names and differ between Python versions, so they are kept: the generated code is
    the same whichever version generates it."""
    return f"{name}_" if keyword.iskeyword(name) else name


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


def _compiled_lines(body: str, call: str, test: str) -> list[str]:
    """The path taken when `Message` is compiled: one call into it does the whole write (a C
    call when the generated module is compiled too)."""
    return [f"{body}if {test}:", f"{body}{INDENT}{call}", f"{body}{INDENT}return"]


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


def _inline_varint(body: str, tag: bytes, test: str, *, zigzag: bool) -> list[str]:
    """A varint setter whose fast path writes straight into the stream writer's buffer.

    Interpreted, the value's bytes come from protozero's varint tables (at most four lookups
    and one slice store). When protozero runs compiled, one `put_varint` (`put_zigzag`) call
    does it all.
    """
    inner = body + INDENT
    deeper = inner + INDENT
    word = int.from_bytes(tag, "little")
    put = "put_zigzag" if zigzag else "put_varint"
    lines = _compiled_lines(body, f"self.{put}(0x{word:02X}, value)", test)
    lines += [f"{body}value = (value << 1) ^ (value >> 63)"] if zigzag else []
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


def _begin_lines(body: str, tag: bytes, cls: str, test: str) -> list[str]:
    """A nested-message starter whose fast path writes the tag and reserves the size in place."""
    inner = body + INDENT
    word = int.from_bytes(tag, "little")
    return [
        f"{body}if {test}:",
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


def _fresh(name: str, taken: set[str]) -> str:
    """`name`, with `_` appended until it is not in `taken`."""
    while name in taken:
        name += "_"
    return name


def _bytes_literal(data: bytes) -> str:
    return 'b"' + "".join(f"\\x{b:02x}" for b in data) + '"'


def _inline_bytes(body: str, tag: bytes, test: str, *, encode: bool) -> list[str]:
    """A string/bytes setter whose fast path stores tag, length and value with one store."""
    inner = body + INDENT
    word = int.from_bytes(tag, "little")
    literal = _bytes_literal(tag)
    if encode:
        lines = _compiled_lines(body, f"self.put_string(0x{word:02X}, value)", test)
        lines += [f"{body}data = value.encode() if isinstance(value, str) else value"]
    else:
        lines = _compiled_lines(body, f"self.put_bytes(0x{word:02X}, value)", test)
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
        self,
        desc: FileDesc,
        index: dict[str, _TypeRef],
        strip_prefix: str,
        package: str,
        *,
        compiled: bool,
    ) -> None:
        self._desc = desc
        self.compiled = compiled and bool(desc.messages)
        """Whether the module gets a `.pxd` (`render_pxd()`)."""
        self._index = index
        self._strip_prefix = strip_prefix
        self._package = package
        self._imports: dict[str, str] = {}
        self._uses_iterable = False
        self._uses_int_enum = False
        self._uses_varint_fast_path = False
        self._uses_varint_tables = False
        self._uses_begin = False
        self._uses_encode_varint = False
        self._packers: set[str] = set()
        self._globals: set[str] = set()
        self._classes: list[str] = []

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
            return ref.name
        if not ref.proto_file.startswith(self._strip_prefix):
            return "Message"
        return f"{self._alias_for(ref.proto_file)}.{ref.name}"

    def _is_packed(self, field: FieldDesc) -> bool:
        return is_packed(field, self._desc.syntax)

    def _enum_lines(self, enum: EnumDesc, name: str, full_name: str) -> list[str]:
        self._uses_int_enum = True
        lines = [f"class {name}(IntEnum):", f'{INDENT}"""{full_name}."""', ""]
        lines += [f"{INDENT}{_identifier(value)} = {number}" for value, number in enum.values]
        return lines

    def _field_lines(self, field: FieldDesc, indent: str) -> list[str]:
        name = field.name.lower()
        body = indent + INDENT
        repeated = field.label == LABEL_REPEATED
        # `cython.compiled` is a constant to Cython: the compiled module keeps only that path.
        test = "cython.compiled or _COMPILED" if self.compiled else "_COMPILED"
        if field.type == TYPE_MESSAGE:
            cls = self._message_type(field)
            method = f"{'add' if repeated else 'begin'}_{name}"
            self._uses_begin = True
            return [
                *_call_lines(indent, f"def {method}(", ["self"], f") -> {cls}:"),
                *_begin_lines(
                    body, encode_tag(field.number, WIRE_TYPE_LENGTH_DELIMITED), cls, test
                ),
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
            return [*signature, *_inline_varint(body, tag_bytes, test, zigzag=kind == "zigzag")]
        if kind in ("string", "bytes"):
            self._uses_varint_tables = True
            return [*signature, *_inline_bytes(body, tag_bytes, test, encode=kind == "string")]
        return [*signature, f"{body}self.put_{kind}(0x{tag:02X}, value)"]

    def _set_fields_lines(self, fields: list[FieldDesc]) -> list[str]:
        """`set_fields(**values)`: several singular scalar fields in one call, in field-number
        order (protobuf's), each field given and not None written once."""
        ordered = sorted(fields, key=lambda f: f.number)
        params = ["self", "*"]
        params += [
            f"{_identifier(f.name.lower())}: {_SCALARS[f.type][2]} | None = None" for f in ordered
        ]
        body = INDENT * 2
        lines = [
            *_call_lines(INDENT, f"def {_SET_FIELDS}(", params, ") -> None:"),
            f'{body}"""Sets each field given (not None), in field-number order: one call."""',
            f"{body}if cython.compiled or _COMPILED:",
        ]
        for f in ordered:
            name = _identifier(f.name.lower())
            kind, wire_type, _ = _SCALARS[f.type]
            tag = tag_word(f.number, wire_type)
            lines += [
                f"{body}{INDENT}if {name} is not None:",
                f"{body}{INDENT * 2}self.put_{kind}(0x{tag:02X}, {name})",
            ]
        lines.append(f"{body}{INDENT}return")
        # The pure path's locals, renamed where a field's parameter has their name.
        taken = {_identifier(f.name.lower()) for f in ordered}
        local = {name: _fresh(name, taken) for name in ("parts", "v", "s", "n", "d")}
        parts = local["parts"]
        lines.append(f"{body}{parts}: list[bytes | bytearray | memoryview] = []")
        for f in ordered:
            name = _identifier(f.name.lower())
            lines += [f"{body}if {name} is not None:", *self._field_parts_lines(f, name, local)]
        self._uses_varint_tables = True
        self._uses_encode_varint = True
        return [
            *lines,
            f'{body}data = b"".join({parts})',
            f"{body}w = self.stream_writer",
            f"{body}p = w.write_ptr",
            f"{body}q = p + len(data)",
            f"{body}if q <= w.end:",
            f"{body}{INDENT}w.buffer[p:q] = data",
            f"{body}{INDENT}w.write_ptr = q",
            f"{body}else:",
            f"{body}{INDENT}self.append_raw(data)",
        ]

    def _field_parts_lines(self, field: FieldDesc, name: str, local: dict[str, str]) -> list[str]:
        """Appends the encoded field `name` (a scalar, not None) to `parts`: the pure path of
        `set_fields`, which stores all the fields' bytes with one slice store."""
        kind, wire_type, _ = _SCALARS[field.type]
        parts, v, s, n, d = (local[x] for x in ("parts", "v", "s", "n", "d"))
        body = INDENT * 3
        inner = body + INDENT
        tag = _bytes_literal(encode_tag(field.number, wire_type))
        if kind in ("fixed32", "fixed64", "float", "double"):
            self._packers.add(kind)
            mask = {"fixed32": " & 0xFFFF_FFFF", "fixed64": " & 0xFFFF_FFFF_FFFF_FFFF"}
            return [f"{body}{parts} += {tag}, _PACK_{kind.upper()}({name}{mask.get(kind, '')})"]
        if kind in ("string", "bytes"):
            value = name
            lines = []
            if kind == "string":
                value = s
                lines = [f"{body}{s} = {name}", f"{body}if isinstance({s}, str):"]
                lines.append(f"{inner}{s} = {s}.encode()")
            return [
                *lines,
                f"{body}{n} = len({value})",
                f"{body}{d} = _VARINTS[{n}] if {n} < 0x4000 else _encode_varint({n})",
                f"{body}{parts} += {tag}, {d}, {value}",
            ]
        self._uses_varint_fast_path = True
        if kind == "zigzag":
            value = f"({name} << 1) ^ ({name} >> 63)"
        else:
            value = f"int({name})" if field.type == TYPE_BOOL else name
        pairs = [f"_PAIRS[{v} & 0x3FFF]", f"_PAIRS[({v} >> 14) & 0x3FFF]"]
        pairs.append(f"_PAIRS[({v} >> 28) & 0x3FFF]")

        def extend(*items: str) -> list[str]:
            """`parts += tag, items...`, laid out the way ruff format lays it out."""
            one_line = f"{inner}{parts} += {', '.join([tag, *items])}"
            if len(one_line) <= LINE_LENGTH:
                return [one_line]
            rows = [f"{inner}{INDENT}{item}," for item in [tag, *items]]
            return [f"{inner}{parts} += (", *rows, f"{inner})"]

        # Negative and 9- or 10-byte values take `encode_varint`; the rest the varint tables.
        return [
            f"{body}{v} = {value}",
            f"{body}if {v} < 0x4000:",
            *extend(f"_VARINTS[{v}] if {v} >= 0 else _encode_varint({v})"),
            f"{body}elif {v} < 0x1000_0000:",
            *extend(pairs[0], f"_VARINTS[{v} >> 14]"),
            f"{body}elif {v} < 0x400_0000_0000:",
            *extend(*pairs[:2], f"_VARINTS[{v} >> 28]"),
            f"{body}elif {v} < 0x100_0000_0000_0000:",
            *extend(*pairs, f"_VARINTS[{v} >> 42]"),
            f"{body}else:",
            *extend(f"_encode_varint({v})"),
        ]

    def _claim_global(self, name: str) -> None:
        if name in self._globals:
            raise DescriptorError(f"{self._desc.name}: generated class {name!r} is ambiguous")
        self._globals.add(name)

    def _message_blocks(self, message: MessageDesc, path: list[str], full_name: str) -> list[str]:
        """The module-level classes of `message`: its nested messages and enums, then its own."""
        own = [*path, message.name]
        cls = _local_name(own)
        self._claim_global(cls)
        blocks: list[list[str]] = []
        aliases: list[str] = []
        names: set[str] = set()

        def claim(name: str) -> None:
            if name in names or name in _RESERVED:
                raise DescriptorError(f"{full_name}: generated name {name!r} is ambiguous")
            names.add(name)

        for nested in message.messages:
            claim(nested.name)
            blocks.append(self._message_blocks(nested, own, f"{full_name}.{nested.name}"))
            aliases.append(f"{INDENT}{nested.name} = {_local_name([*own, nested.name])}")
        for enum in message.enums:
            claim(enum.name)
            enum_class = _local_name([*own, enum.name])
            self._claim_global(enum_class)
            blocks.append(self._enum_lines(enum, enum_class, f"{full_name}.{enum.name}"))
            aliases.append(f"{INDENT}{enum.name} = {enum_class}")
        lines = [
            f"class {cls}(Message):",
            f'{INDENT}"""{full_name}."""',
            "",
            f"{INDENT}__slots__ = ()",
        ]
        if aliases:
            lines += ["", *aliases]
        constants: list[str] = []
        for enum in message.enums:
            for value_name, number in enum.values:
                claim(_identifier(value_name))
                constants.append(f"{INDENT}{_identifier(value_name)} = {number}")
        for field in message.fields:
            claim(f"FIELD_{field.name.upper()}")
            constants.append(f"{INDENT}FIELD_{field.name.upper()} = {field.number}")
        if constants:
            lines += ["", *constants]
        for field in message.fields:
            field_lines = self._field_lines(field, INDENT)
            claim(field_lines[0].strip().split("(")[0].removeprefix("def "))
            lines += ["", *field_lines]
        scalars = [f for f in message.fields if f.label != LABEL_REPEATED and f.type in _SCALARS]
        if self.compiled and len(scalars) > 1 and _SET_FIELDS not in names:
            lines += ["", *self._set_fields_lines(scalars)]
        self._classes.append(cls)
        return [*(line for block in blocks for line in [*block, "", ""]), *lines]

    def render(self) -> str:
        scope = f"{self._desc.package}." if self._desc.package else ""
        blocks: list[list[str]] = []
        for enum in self._desc.enums:
            self._claim_global(enum.name)
            blocks.append(self._enum_lines(enum, enum.name, f"{scope}{enum.name}"))
            constants = [f"{_identifier(n)} = {v}" for n, v in enum.values]
            blocks.append(constants)
        for message in self._desc.messages:
            blocks.append(self._message_blocks(message, [], f"{scope}{message.name}"))
        # Nested classes are named like upstream's C++ ones (`TrackEvent_LegacyEvent`).
        header = ["# ruff: noqa: N801"] if any("_" in name for name in self._globals) else []
        header += [
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
        if self.compiled:
            sections.append(
                [
                    "try:",
                    f"{INDENT}import cython",
                    "except ImportError:  # installed without Cython: runs as pure Python",
                    f"{INDENT}from protozero import _cython_shim as cython",
                ]
            )
        protozero_imports = []
        if self._uses_varint_tables or self._uses_begin:
            protozero_imports.append("from protozero import COMPILED as _COMPILED")
        if self._uses_begin:
            protozero_imports.append(f"from {_MESSAGE} import SUSPENDED_WRITER as _SUSPENDED")
        if self._desc.messages:  # from its module: the compiled build cimports it from there
            protozero_imports.append(f"from {_MESSAGE} import Message")
        utils = [f"PACK_{kind.upper()} as _PACK_{kind.upper()}" for kind in sorted(self._packers)]
        if self._uses_varint_tables:
            utils.append("SHORT_VARINTS as _VARINTS")
        if self._uses_varint_fast_path:
            utils.append("VARINT_PAIRS as _PAIRS")
        if self._uses_encode_varint:
            utils.append("encode_varint as _encode_varint")
        protozero_imports += [f"from {_PROTO_UTILS} import {name}" for name in utils]
        sections.append(protozero_imports)
        sections.append(self._import_lines())
        for section in sections:
            if section:
                header += ["", *section]
        out = header
        for block in blocks:
            out += ["", "", *block]
        return "\n".join(out) + "\n"

    def render_pxd(self) -> str:
        """The C side of the module `render()` returned (call it after): its message classes
        as `cdef class`es of `Message`. Their methods stay Python-callable `def`s; compiled,
        each calls `Message`'s compiled writer directly."""
        lines = [
            f"# The compiled build of the ProtoZero writers for {self._desc.name}.",
            "# Generated by protozero.codegen; do not edit.",
            "",
            f"from {_MESSAGE} cimport Message",
        ]
        for cls in self._classes:
            lines += ["", "", f"cdef class {cls}(Message):", f"{INDENT}pass"]
        return "\n".join(lines) + "\n"

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


def generate(
    files: list[FileDesc], strip_prefix: str, package: str, compiled: Collection[str] = ()
) -> dict[str, str]:
    """Source text of every `*_pbzero.py` module, by path relative to the output directory.

    The modules of the `.proto` files whose names match a pattern of `compiled` (fnmatch) get a
    `*_pbzero.pxd` beside them: their message classes are built as compiled subclasses of the
    compiled `Message` wherever the package that holds them is built with Cython.
    """
    index = _index_types(files)
    out: dict[str, str] = {}
    for desc in files:
        if desc.name.startswith(strip_prefix):
            path = module_path(desc.name, strip_prefix)
            is_compiled = any(fnmatch.fnmatchcase(desc.name, p) for p in compiled)
            renderer = _FileRenderer(desc, index, strip_prefix, package, compiled=is_compiled)
            out[path] = renderer.render()
            if renderer.compiled:
                out[path.removesuffix(".py") + ".pxd"] = renderer.render_pxd()
    return out
