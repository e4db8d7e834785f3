"""The service core, free of I/O: sessions, buffers, packet validation, the trace it writes.

Upstream's `src/tracing/service/`. Its endpoints run on one TaskRunner; `perfetto_service.ipc`
puts them behind sockets.
"""
