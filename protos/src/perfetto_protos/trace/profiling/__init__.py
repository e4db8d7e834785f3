"""Generated from protos/perfetto/trace/profiling/ by tools/gen_protos.py; do not edit."""
