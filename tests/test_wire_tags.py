"""No hand-written encoder or decoder spells a field tag: each takes it from perfetto_protos.tags.

`tools/gen_protos.py` generates the field numbers and tags of every message once
(`perfetto_protos/tags/fields.py` and `fields_c.pxd`). This scans the hand-written sources of
every package for what spells one instead:

- a bytes literal written with `\\x` escapes that starts with the tag of a field of a message
  the encoders write (`b"\\x5a"`, TracePacket.track_event);
- a hex integer stored through a pointer (`p[0] = 0x5A`) or compared (`tag == 0x0A`);
- a field number compared with an integer (`field_id == 8`, `sub_id in {1, 2}`);
- a tag made from a field number (`encode_tag(10, 0)`, `(42 << 3) | 0`);
- a constant that names a field by number (`_PROCESS_TREE = 2  # TracePacket.process_tree`);
- in a module that takes constants from perfetto_protos.tags already, a constant that names an
  enum value by its number (`_SLICE_BEGIN = 1`, TrackEvent.Type.TYPE_SLICE_BEGIN). (Elsewhere
  such tables stay: the SDK's modules, for instance, do not import perfetto_protos.)
- a hand-written encoder (a function whose first parameter is a field number or tag, as
  `varint_field(field_number, value)`) called with an integer literal (`varint_field(2, x)`);
- in a module that calls such an encoder or takes constants from perfetto_protos.tags, a
  constant (module level, or in a class with no base) whose name is a field's and whose value
  is that field's number (`_TRUSTED_UID = 3`, TracePacket.trusted_uid).

And no module writes its list of tags twice (once cimported from `fields_c` for the compiled
build, once imported from `fields` for the pure one): it names the module under one alias.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from perfetto_protos.tags import fields

ROOT = Path(__file__).resolve().parent.parent

WRITTEN = (
    "TracePacket_",
    "Trace_",
    "TrackEvent_",
    "InternedData_",
    "TracePacketDefaults_",
    "DebugAnnotation_",
)
"""The messages whose tags the hand-written encoders write (every other message's tags are
caught by the comparisons and the tag-making rules)."""

TAG_BYTES = {
    bytes((value,)) if value < 0x80 else bytes((value & 0x7F | 0x80, value >> 7))
    for name, value in vars(fields).items()
    if name.endswith("_TAG") and name.startswith(WRITTEN) and value < 1 << 14
}
"""The encoded tags (1 or 2 bytes) of the fields of the messages in WRITTEN."""

_BYTES_LITERAL = re.compile(r"""\bb(["'])((?:\\x[0-9a-fA-F]{2})+)""")
_POINTER_STORE = re.compile(r"\w\[[^\]]*\]\s*=\s*0x[0-9a-fA-F]+\b(?!u)")
_COMPARED = re.compile(
    r"\b(?:tag|field_id|sub_id|other|\w+\.id)\s*(?:==|!=)\s*(?:0x[0-9a-fA-F]+|[1-9]\d*)\b"
    r"|\b(?:tag|field_id|sub_id|other)\s+(?:not\s+)?in\s+[{(\[]\s*\d"
)
_MADE = re.compile(r"\b(?:encode_tag|make_tag)\(\s*\d|\(\s*\d+\s*<<\s*3\s*\)")
_NAMED_FIELD = re.compile(
    r"^(_?[A-Z][A-Z0-9_]*) = \d+\s*#\s*([A-Z]\w*(?:\.[A-Z]\w*)*)\.([a-z]\w*)\b"
)
"""A constant that spells a field's number, naming the field in its comment."""
_NUMBER_CONSTANT = re.compile(r"^(_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+) = (\d+)\b")


def _enum_values() -> dict[str, set[int]]:
    """The generated enum values by each name a constant could give one: every `_`-joined tail
    of two words or more of the value's own name (`TYPE_SLICE_BEGIN`, `SLICE_BEGIN`). A value's
    name is the upper-case end of its constant (`TrackEvent_Type_TYPE_SLICE_BEGIN`); a field's
    constant ends in one upper-case word (`TracePacket_track_event_ID`)."""
    out: dict[str, set[int]] = {}
    for name, value in vars(fields).items():
        words = name.split("_")
        start = len(words)
        while start > 0 and words[start - 1].isupper():
            start -= 1
        for tail in range(start, len(words) - 1):
            out.setdefault("_".join(words[tail:]), set()).add(value)
    return out


ENUM_VALUES = _enum_values()

_NAMED_BYTE = re.compile(r"^(_?[A-Z][A-Z0-9_]*) = 0x[0-9a-fA-F]{2}$", re.M)
"""A constant that names a byte in hex (`_MOVE_PAGE = 0x08`): a tag, if a walk compares a tag
with it (`if tag == _MOVE_PAGE`)."""

NOT_CONVERTED = {
    "packages/protozero/src/protozero/codegen/_descriptors.py": "google/protobuf/descriptor"
    ".proto, which protos/ does not hold: protozero reads it to generate the rest",
    "packages/service/src/perfetto_service/core/_trace_buffer.py": "its chunk record's "
    '"CHU" mark, stored byte by byte, is no tag',
}
"""Hand-written sources the scan leaves out, and why."""

SDK_TABLES = {
    "packages/client/src/perfetto_client/_track_event_writer.py",
    "packages/client/src/perfetto_client/_debug_annotations.py",
    "packages/client/src/perfetto_client/_events.py",
}
"""The SDK's modules, which `import perfetto_client` loads: importing perfetto_protos (and so
protozero) there would cost more than the rest of the import, so their module-level tables of
encoded tags stay bytes literals, each checked here against the generated tag its comment
names (`_TS = b"\\x40"  # TracePacket.timestamp`). The rest of these modules is scanned."""

_TABLE_LINE = re.compile(
    r"""^(_[A-Z0-9_]+) = b(["'])((?:\\x[0-9a-fA-F]{2})+)\2\s*#\s*([A-Z]\w*(?:\.[A-Z]\w*)*)\.(\w+)"""
)


def hand_written_sources() -> list[Path]:
    """Every `.py`, `.pyx` and `.pxd` under the packages' `src/` that no tool generated."""
    generated_root = ROOT / "protos" / "src" / "perfetto_protos"
    out = []
    for src in sorted([*ROOT.glob("packages/*/src"), ROOT / "protos" / "src"]):
        for path in sorted(src.rglob("*")):
            if path.suffix not in {".py", ".pyx", ".pxd"} or "__pycache__" in path.parts:
                continue
            if path.parent != generated_root and generated_root in path.parents:
                continue  # every subdirectory of perfetto_protos is generated
            out.append(path)
    return out


_ENCODER_PARAMETERS = {"field_number", "field_id", "tag"}
_CYTHON_DEF = re.compile(
    r"\b(?:def|cdef|cpdef)\s+(?:[\w\[\]*]+\s+)*?(\w+)\(\s*(?:self\s*,\s*)?(?:[\w*]+\s+)*(\w+)\b"
)


def hand_encoders() -> set[str]:
    """The names of the hand-written functions and methods whose first parameter (after `self`)
    is a field number or tag (`varint_field`, `encode_tag`, `Message.append_varint`)."""
    out: set[str] = set()
    for path in hand_written_sources():
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".py":
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    names = [a.arg for a in node.args.args if a.arg not in {"self", "cls"}]
                    if names and names[0] in _ENCODER_PARAMETERS:
                        out.add(node.name)
        else:
            out.update(
                m.group(1) for m in _CYTHON_DEF.finditer(text) if m.group(2) in _ENCODER_PARAMETERS
            )
    return {name for name in out if not name.startswith("__")}


HAND_ENCODERS = hand_encoders()
_ENCODER_CALL = re.compile(rf"\b(?:{'|'.join(sorted(HAND_ENCODERS))})\(")
_ENCODED_LITERAL = re.compile(
    rf"\b(?:{'|'.join(sorted(HAND_ENCODERS))})\(\s*(?:0x[0-9a-fA-F]+|\d+)\s*[,)]"
)


def _field_numbers() -> dict[str, set[int]]:
    """The generated field numbers by field name in upper case (`TRUSTED_UID`: 3 among others,
    from `TracePacket_trusted_uid_ID`); a field's name is the lower-case end of its constant."""
    out: dict[str, set[int]] = {}
    for name, value in vars(fields).items():
        if not name.endswith("_ID"):
            continue
        words = name.removesuffix("_ID").split("_")
        start = len(words)
        while start > 0 and not words[start - 1][:1].isupper():
            start -= 1
        if start < len(words):
            out.setdefault("_".join(words[start:]).upper(), set()).add(value)
    return out


FIELD_NUMBERS = _field_numbers()
_INT_CONSTANT = re.compile(r"^(_?[A-Z][A-Z0-9_]*)\s*=\s*(0x[0-9a-fA-F]+|\d+)\b")


def _int_constants(path: Path, text: str) -> Iterator[tuple[int, str, int]]:
    """(line, name, value) of each integer constant at module level or in a class with no base
    (an enum's members are values, not field numbers)."""
    if path.suffix != ".py":
        for number, line in enumerate(text.splitlines(), 1):
            match = _INT_CONSTANT.match(line)
            if match is not None:
                yield number, match.group(1), int(match.group(2), 0)
        return
    tree = ast.parse(text)
    bodies = [tree.body] + [
        node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and not node.bases
    ]
    for body in bodies:
        for node in body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
                and type(node.value.value) is int
            ):
                yield node.lineno, node.targets[0].id, node.value.value


def field_number_constants(path: Path) -> list[str]:
    """In a module that encodes (calls a hand encoder) or takes perfetto_protos.tags: the
    constants whose name is a field's (perhaps ending `_FIELD` or `_ID`) and whose value is
    that field's number, as `path:line: NAME = value`."""
    text = path.read_text(encoding="utf-8")
    if "perfetto_protos.tags" not in text and _ENCODER_CALL.search(text) is None:
        return []
    rel = path.relative_to(ROOT) if ROOT in path.parents else path
    found = []
    for number, name, value in _int_constants(path, text):
        base = name.lstrip("_")
        names = {base} | {
            base.removesuffix(end) for end in ("_FIELD_NUMBER", "_FIELD", "_ID") if base != end
        }
        if any(value in FIELD_NUMBERS.get(candidate, ()) for candidate in names):
            found.append(f"{rel}:{number}: {name} = {value}")
    return found


def _code_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text without its comment) of each line; docstrings are kept (rarely
    matched) but comments go: `# Trace.packet (1)` is how a constant says what it is."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        yield number, line.split("#", 1)[0] if "#" in line and '"' not in line else line


def _bytes_tags(path: Path) -> Iterator[tuple[int, str]]:
    if path.suffix == ".py":
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
                spelled = ast.get_source_segment(text, node) or ""
                if "\\x" in spelled and any(node.value.startswith(t) for t in TAG_BYTES):
                    yield node.lineno, spelled
        return
    for number, line in _code_lines(path):
        for match in _BYTES_LITERAL.finditer(line):
            value = bytes.fromhex(match.group(2).replace("\\x", ""))
            if any(value.startswith(t) for t in TAG_BYTES):
                yield number, match.group(0)


def spelled_tags(path: Path) -> list[str]:
    """Where `path` spells a field tag or number, as `path:line: text` (the first rule that
    matches a line)."""
    rel = path.relative_to(ROOT) if ROOT in path.parents else path
    found = [f"{rel}:{n}: {text}" for n, text in _bytes_tags(path)]
    compared = set(re.findall(r"\btag\s*==\s*(\w+)", path.read_text(encoding="utf-8")))
    for number, line in _code_lines(path):
        for rule in (_POINTER_STORE, _COMPARED, _MADE, _ENCODED_LITERAL):
            found += [f"{rel}:{number}: {m.group(0)}" for m in rule.finditer(line.rstrip())]
        named = _NAMED_BYTE.match(line.rstrip())
        if named is not None and named.group(1) in compared:
            found.append(f"{rel}:{number}: {named.group(0)}")
    text = path.read_text(encoding="utf-8")
    takes_tags = "perfetto_protos.tags" in text
    for number, line in enumerate(text.splitlines(), 1):
        field = _NAMED_FIELD.match(line)
        if field is not None:
            found.append(f"{rel}:{number}: {field.group(0)}")
        constant = _NUMBER_CONSTANT.match(line)
        if constant is not None and takes_tags:
            name, value = constant.group(1).lstrip("_"), int(constant.group(2))
            if value in ENUM_VALUES.get(name, ()):
                found.append(f"{rel}:{number}: {constant.group(0)}")
    found += field_number_constants(path)
    lines = [finding.split(": ", 1)[0] for finding in found]
    return [finding for i, finding in enumerate(found) if lines[i] not in lines[:i]]


def test_the_scan_covers_the_encoders_and_finds_a_spelled_tag(tmp_path: Path) -> None:
    sources = {p.relative_to(ROOT).as_posix() for p in hand_written_sources()}
    for encoder in (
        "packages/client/src/perfetto_client/_tracer/_packet_batch.pxd",
        "packages/client/src/perfetto_client/_tracer/_packet_batch_pure.py",
        "packages/client/src/perfetto_client/_track_event_writer.py",
        "packages/service/src/perfetto_service/core/_chunk_mover.py",
        "packages/cli/src/perfetto_cmd/_summary.py",
    ):
        assert encoder in sources
    assert not any("_pbzero" in s or s.endswith("tags/fields.py") for s in sources)
    sample = tmp_path / "sample.pyx"
    sample.write_text(
        "from perfetto_protos.tags.fields_c cimport Trace_packet_TAG\n"
        'TAIL = b"\\x5a\\x02"\nTEXT = b"\\x00\\x01"\np[0] = 0x5A\nif field_id == 8:\n'
        "TAG = encode_tag(10, 0)\n_MOVE_PAGE = 0x08\nif field_id == 0:\nif tag == _MOVE_PAGE:\n"
        "_PROCESS_TREE = 2  # TracePacket.process_tree\n_SLICE_BEGIN = 1\n_SLICE_END = 1\n"
    )
    got = [line.split(": ", 1)[1] for line in spelled_tags(sample)]
    assert got == [
        'b"\\x5a\\x02',
        "p[0] = 0x5A",
        "field_id == 8",
        "encode_tag(1",
        "_MOVE_PAGE = 0x08",
        "_PROCESS_TREE = 2  # TracePacket.process_tree",
        "_SLICE_BEGIN = 1",
    ]


def test_the_scan_finds_a_field_number_given_to_a_hand_encoder(tmp_path: Path) -> None:
    assert {"varint_field", "nested_field", "bytes_field", "encode_tag"} <= HAND_ENCODERS
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import enum\n"
        "from perfetto_service.core._field_encoding import (\n"
        "    bytes_field, nested_field, varint_field\n)\n"
        "_TRUSTED_UID = 3\n_TRACE_CONFIG_FIELD = 33\nSYNCED_CLOCKS_KEPT = 5\n"
        "class Kind:\n    TRACING_STARTED = 2\n    SEIZED_FOR_BUGREPORT = 7\n"
        "class Unit(enum.IntEnum):\n    COUNT = 2\n"
        "body = varint_field(2, lsb) + varint_field(Msb_ID, msb)\n"
        "nested_field(1, b'') + nested_field(n, b'')\nbytes_field(0x04, b'')\n"
    )
    got = [line.split(": ", 1)[1] for line in spelled_tags(sample)]
    assert got == [
        "varint_field(2,",
        "nested_field(1,",
        "bytes_field(0x04,",
        "_TRUSTED_UID = 3",
        "_TRACE_CONFIG_FIELD = 33",
        "TRACING_STARTED = 2",
    ]
    plain = tmp_path / "plain.py"
    plain.write_text("_TRUSTED_UID = 3\n")
    assert spelled_tags(plain) == []


def _encoded(tag: int) -> bytes:
    return bytes((tag,)) if tag < 0x80 else bytes((tag & 0x7F | 0x80, tag >> 7))


def sdk_table_problems(path: Path) -> tuple[set[int], list[str]]:
    """The lines of `path`'s table of encoded tags, and what is wrong with them: a value that
    does not start with the encoding of the tag its comment names."""
    lines: set[int] = set()
    problems = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = _TABLE_LINE.match(line)
        if match is None:
            continue
        lines.add(number)
        value = bytes.fromhex(match.group(3).replace("\\x", ""))
        name = f"{match.group(4).replace('.', '_')}_{match.group(5)}_TAG"
        tag = getattr(fields, name, None)
        if tag is None or not value.startswith(_encoded(tag)):
            problems.append(f"{path.relative_to(ROOT)}:{number}: {match.group(1)} is not {name}")
    return lines, problems


def test_no_hand_written_source_spells_a_field_tag() -> None:
    found = []
    for path in hand_written_sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel in NOT_CONVERTED:
            continue
        spelled = spelled_tags(path)
        if rel in SDK_TABLES:
            table, problems = sdk_table_problems(path)
            spelled = [s for s in spelled if int(s.split(":")[1]) not in table] + problems
        found += spelled
    assert found == []


def test_the_sdk_tables_are_checked_against_the_generated_tags() -> None:
    for rel in SDK_TABLES:
        lines, problems = sdk_table_problems(ROOT / rel)
        assert lines
        assert problems == []


def imported_twice(path: Path) -> list[str]:
    """The names `path` takes both from `fields_c` (cimported, the compiled build) and from
    `fields` (the pure build): a list written twice, where one alias of the module would do."""
    if path.suffix != ".py":
        return []
    by_module: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            module = node.module.removeprefix("cython.cimports.")
            by_module.setdefault(module, set()).update(alias.name for alias in node.names)
    twice = by_module.get("perfetto_protos.tags.fields_c", set()) & by_module.get(
        "perfetto_protos.tags.fields", set()
    )
    rel = path.relative_to(ROOT) if ROOT in path.parents else path
    return [f"{rel}: {name}" for name in sorted(twice)]


def test_no_module_writes_its_tags_twice(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "if cython.compiled:\n"
        "    from cython.cimports.perfetto_protos.tags.fields_c import Trace_packet_TAG\n"
        "else:\n"
        "    from perfetto_protos.tags.fields import Trace_packet_TAG\n"
    )
    assert [line.split(": ")[1] for line in imported_twice(sample)] == ["Trace_packet_TAG"]
    assert [line for path in hand_written_sources() for line in imported_twice(path)] == []
