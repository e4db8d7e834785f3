"""The Perfetto heap profiler."""

from importlib.metadata import version as _version

from heapprofd._errors import HeapprofdError

__version__: str = _version("perfetto-heapprofd")

__all__ = ["HeapprofdError", "__version__"]
