"""`python -m perfetto_service.traced` runs the daemon."""

import sys

from perfetto_service.traced._main import main

sys.exit(main())
