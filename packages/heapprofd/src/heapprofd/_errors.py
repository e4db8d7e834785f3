"""The root exception of heapprofd."""


class HeapprofdError(Exception):
    """Base class of every error raised by heapprofd."""
