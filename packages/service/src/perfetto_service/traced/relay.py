"""`python -m perfetto_service.traced.relay` runs `traced_relay`."""

import sys

from perfetto_service.traced._relay_main import relay_main

if __name__ == "__main__":
    sys.exit(relay_main())
