"""Generated from protos/perfetto/trace/interned_data/ by tools/gen_protos.py; do not edit."""
