"""Generated from protos/perfetto/trace/ by tools/gen_protos.py; do not edit."""
