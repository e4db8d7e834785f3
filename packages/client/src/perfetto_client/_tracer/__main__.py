"""`python -m perfetto_client._tracer` is `perfetto-trace`."""

import sys

from perfetto_client._trace_command import main

sys.exit(main())
