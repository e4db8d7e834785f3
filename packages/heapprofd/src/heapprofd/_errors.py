"""The root exception of heapprofd."""


class HeapprofdError(Exception):
    """Base class of every error raised by heapprofd."""


class UnwindError(HeapprofdError):
    """The native unwinder cannot work on a process (libdw's message)."""
