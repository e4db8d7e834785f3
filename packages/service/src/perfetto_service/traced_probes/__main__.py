"""`python -m perfetto_service.traced_probes` runs traced_probes."""

import sys

from perfetto_service.traced_probes._main import main

sys.exit(main())
