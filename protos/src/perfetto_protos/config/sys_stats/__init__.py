"""Generated from protos/perfetto/config/sys_stats/ by tools/gen_protos.py; do not edit."""
