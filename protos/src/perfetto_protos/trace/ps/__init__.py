"""Generated from protos/perfetto/trace/ps/ by tools/gen_protos.py; do not edit."""
