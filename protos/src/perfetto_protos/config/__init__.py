"""Generated from protos/perfetto/config/ by tools/gen_protos.py; do not edit."""
