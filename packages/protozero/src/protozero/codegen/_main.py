"""Command line of the code generator."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from protozero.codegen._descriptors import DescriptorError, parse_descriptor_set
from protozero.codegen._generator import generate
from protozero.codegen._tags import field_tags, render_tags_pxd, render_tags_py


def main(argv: list[str] | None = None) -> int:
    """Writes `OUT_DIR/<file minus prefix, minus .proto>_pbzero.py` for each selected file (and
    a `.pxd` beside it for those `--compiled` selects), and the field tags `--tags` asks for."""
    parser = argparse.ArgumentParser(
        prog="python -m protozero.codegen",
        description="Generates ProtoZero writer classes from a FileDescriptorSet "
        "(protoc --include_imports --descriptor_set_out=...).",
    )
    parser.add_argument("descriptor_set", type=Path, help="serialized FileDescriptorSet")
    parser.add_argument("out_dir", type=Path, help="directory the modules are written under")
    parser.add_argument(
        "--strip-prefix",
        default="",
        help="only files whose name starts with this are generated; it is removed from paths",
    )
    parser.add_argument(
        "--package", default="", help="import path of OUT_DIR, used for cross-file imports"
    )
    parser.add_argument(
        "--compiled",
        action="append",
        default=[],
        metavar="PATTERN",
        help="also write a .pxd (a compiled build) for the files matching this glob; repeatable",
    )
    parser.add_argument(
        "--tags",
        default="",
        metavar="STEM",
        help="also write the field tags and enum values of the selected files: OUT_DIR/STEM.py "
        "(Python constants) and OUT_DIR/STEM_c.pxd (C constants), e.g. --tags tags/fields",
    )
    args = parser.parse_args(argv)
    try:
        data = args.descriptor_set.read_bytes()
    except OSError as exc:
        print(f"protozero.codegen: cannot read {args.descriptor_set}: {exc}", file=sys.stderr)
        return 2
    try:
        files = parse_descriptor_set(data)
        sources = generate(files, args.strip_prefix, args.package, args.compiled)
        if args.tags:
            tags = field_tags(files, args.strip_prefix)
            dotted = f"{args.package}.{args.tags}" if args.package else args.tags
            dotted = dotted.replace("/", ".")
            sources[f"{args.tags}.py"] = render_tags_py(tags, f"{dotted}_c")
            sources[f"{args.tags}_c.pxd"] = render_tags_pxd(tags, dotted)
    except DescriptorError as exc:
        print(f"protozero.codegen: {args.descriptor_set}: {exc}", file=sys.stderr)
        return 1
    for rel, text in sorted(sources.items()):
        path = args.out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return 0
