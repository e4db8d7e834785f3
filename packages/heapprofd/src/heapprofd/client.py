"""Importing this module makes the process profilable by heapprofd at runtime.

It installs the allocator hooks (idle until a session starts) and the handler of the
profiling signal the daemon sends to running targets.
"""

from heapprofd._client import Heap, connect, enable, is_profiling, wait_until_profiling

__all__ = ["Heap", "connect", "enable", "is_profiling", "wait_until_profiling"]

enable()
