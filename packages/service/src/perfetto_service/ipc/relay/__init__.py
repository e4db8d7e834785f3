"""Multi-machine tracing: the RelayPort a service serves and the relay that forwards to it."""
