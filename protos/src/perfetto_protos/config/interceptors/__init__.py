"""Generated from protos/perfetto/config/interceptors/ by tools/gen_protos.py; do not edit."""
