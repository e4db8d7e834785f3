"""`python -m heapprofd`: the daemon, or `run [--] script.py [args]`."""

import sys

from heapprofd._daemon import main

sys.exit(main())
