"""The ProtoZero code generator: typed append-only writer classes from a FileDescriptorSet.

Run it as `python -m protozero.codegen DESCRIPTOR_SET OUT_DIR --strip-prefix perfetto/
--package perfetto_protos`.
"""

from protozero.codegen._descriptors import DescriptorError, FileDesc, parse_descriptor_set
from protozero.codegen._generator import generate, module_path
from protozero.codegen._main import main

__all__ = ["DescriptorError", "FileDesc", "generate", "main", "module_path", "parse_descriptor_set"]
