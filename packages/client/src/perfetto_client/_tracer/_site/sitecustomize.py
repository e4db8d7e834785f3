"""Starts recording in a Python child of a program run with `perfetto-trace --follow-children`.

This directory is put first on the children's PYTHONPATH; any other `sitecustomize` on the
path still runs afterwards.
"""

import importlib.machinery
import importlib.util
import os
import sys
from typing import Any

from perfetto_client._tracer._children import start_from_environment


def _recording(options: Any) -> Any:
    # Loaded here, when this child records: not in multiprocessing's helper processes.
    from perfetto_client._tracer._recording import Recording

    return Recording(options)


start_from_environment(_recording)

_here = os.path.dirname(os.path.abspath(__file__))
_path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _path)
if _spec is not None and _spec.loader is not None:
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
