"""Generated from protos/perfetto/trace/sys_stats/ by tools/gen_protos.py; do not edit."""
