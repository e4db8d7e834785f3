"""Generated from protos/perfetto/trace/ftrace/ by tools/gen_protos.py; do not edit."""
