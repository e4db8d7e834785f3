"""Generated from protos/perfetto/config/profiling/ by tools/gen_protos.py; do not edit."""
