"""The service side of the IPC: the producer and consumer ports and the host serving them."""
