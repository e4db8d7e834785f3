"""The service behind upstream's sockets (`service/`) and the clients that reach it from
another process (`producer/`, `consumer/`), as upstream's `src/tracing/ipc/`."""
