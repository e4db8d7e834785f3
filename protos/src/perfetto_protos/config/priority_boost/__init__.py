"""Generated from protos/perfetto/config/priority_boost/ by tools/gen_protos.py; do not edit."""
