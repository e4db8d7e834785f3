"""Generated from protos/perfetto/trace/track_event/ by tools/gen_protos.py; do not edit."""
