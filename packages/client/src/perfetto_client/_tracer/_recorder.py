"""The compiled recorder for this interpreter: on `sys.monitoring` from 3.12, else the profile hook.

Both feed the one recorder (`_thread_recorder`) and have one interface (`ThreadRecorder`,
`new_generation`, `uninstall_all_threads`, `split_packets`, `now_ns`); importing this one fails
where they are not built.
"""

from __future__ import annotations

import sys

from perfetto_client._tracer import _thread_recorder

if not _thread_recorder.COMPILED:  # PERFETTO_PY_PURE=1, or a package it cimports runs pure
    raise ImportError(f"{_thread_recorder.__name__} runs as pure Python")
if sys.version_info >= (3, 12):
    from perfetto_client._tracer._monitor import (  # type: ignore[import-not-found]
        COMPILED,
        new_generation,
        now_ns,
        split_packets,
    )
    from perfetto_client._tracer._monitor import (
        MonitoringRecorder as ThreadRecorder,
    )
    from perfetto_client._tracer._monitor import (
        uninstall as uninstall_all_threads,
    )
else:
    from perfetto_client._tracer._hook import (  # type: ignore[import-not-found]
        COMPILED,
        new_generation,
        now_ns,
        split_packets,
        uninstall_all_threads,
    )
    from perfetto_client._tracer._hook import (
        ProfileRecorder as ThreadRecorder,
    )

__all__ = [
    "COMPILED",
    "ThreadRecorder",
    "new_generation",
    "now_ns",
    "split_packets",
    "uninstall_all_threads",
]
