"""Generated from protos/perfetto/config/process_stats/ by tools/gen_protos.py; do not edit."""
