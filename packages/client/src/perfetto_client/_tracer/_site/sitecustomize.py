"""Starts recording in a Python child of a program run with `perfetto-trace --follow-children`.

This directory is put first on the children's PYTHONPATH; any other `sitecustomize` on the
path still runs afterwards.
"""

import contextlib
import importlib
import os
import sys

from perfetto_client._tracer._children import start_from_environment

start_from_environment()

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules["sitecustomize"]
with contextlib.suppress(ImportError):
    importlib.import_module("sitecustomize")
