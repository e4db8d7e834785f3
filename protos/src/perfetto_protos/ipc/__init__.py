"""Generated from protos/perfetto/ipc/ by tools/gen_protos.py; do not edit."""
