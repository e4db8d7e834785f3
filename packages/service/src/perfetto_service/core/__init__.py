"""The service core, free of I/O: sessions, buffers, packet validation, the trace it writes.

Upstream's `src/tracing/service/`. Its endpoints run on one TaskRunner; `perfetto_service.ipc`
puts them behind sockets. The package's compiled modules are all here, so the choice between
its compiled and pure build is made here rather than in `perfetto_service/__init__.py`, which
imports nothing (not even protozero) until a name is used.
"""

from protozero import _native

_native.select_build("perfetto_service")
_native.report("perfetto_service")
