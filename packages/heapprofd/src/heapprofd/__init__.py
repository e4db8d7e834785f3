"""The Perfetto heap profiler for Python processes.

`heapprofd` (the daemon) is a producer of upstream's `android.heapprofd` data source;
`import heapprofd.client` makes a process profilable, and `Heap` reports a custom heap.
"""

from typing import TYPE_CHECKING, Any

from heapprofd._client import Heap
from heapprofd._errors import HeapprofdError

__all__ = ["Heap", "HeapprofdError", "__version__"]


if TYPE_CHECKING:
    __version__: str
else:

    def __getattr__(name: str) -> Any:
        if name != "__version__":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib.metadata import version  # costs as much as the package: only when asked

        globals()["__version__"] = value = version("perfetto-heapprofd")
        return value
