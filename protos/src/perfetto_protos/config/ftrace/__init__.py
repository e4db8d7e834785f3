"""Generated from protos/perfetto/config/ftrace/ by tools/gen_protos.py; do not edit."""
