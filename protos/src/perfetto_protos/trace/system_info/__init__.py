"""Generated from protos/perfetto/trace/system_info/ by tools/gen_protos.py; do not edit."""
