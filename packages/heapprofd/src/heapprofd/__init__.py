"""The Perfetto heap profiler for Python processes.

`heapprofd` (the daemon) is a producer of upstream's `android.heapprofd` data source;
`import heapprofd.client` makes a process profilable, and `Heap` reports a custom heap.
"""

from importlib.metadata import version as _version

from heapprofd._client import Heap
from heapprofd._errors import HeapprofdError

__version__: str = _version("perfetto-heapprofd")

__all__ = ["Heap", "HeapprofdError", "__version__"]
