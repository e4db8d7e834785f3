"""`python -m perfetto_client._tracer` is `perfetto-trace`."""

import sys

from perfetto_client._tracer._command import main

sys.exit(main())
