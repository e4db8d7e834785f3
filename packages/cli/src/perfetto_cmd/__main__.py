"""`python -m perfetto_cmd`: the `perfetto` command."""

import sys

from perfetto_cmd._main import main

sys.exit(main())
