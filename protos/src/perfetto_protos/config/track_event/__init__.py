"""Generated from protos/perfetto/config/track_event/ by tools/gen_protos.py; do not edit."""
