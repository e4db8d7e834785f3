"""Generated from protos/perfetto/tags/ by tools/gen_protos.py; do not edit."""
