"""Generated from protos/perfetto/common/ by tools/gen_protos.py; do not edit."""
