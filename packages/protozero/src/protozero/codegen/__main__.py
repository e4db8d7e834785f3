"""`python -m protozero.codegen`."""

import sys

from protozero.codegen._main import main

sys.exit(main())
