"""Generated from protos/perfetto/trace/perfetto/ by tools/gen_protos.py; do not edit."""
