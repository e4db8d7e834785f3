"""What the tests of every perfetto-py package share: limits, waits, daemons that say when they
are ready, child processes that end, and traces read with upstream's schema; and the line a
benchmark prints for the README's performance table, and the instructions of its loop."""

from perfetto_testing._bench import ROW_PREFIX, loop_instructions, report_row
from perfetto_testing._browser import CHROMIUM, OpenedPage, open_page, screenshot
from perfetto_testing._processes import NotifyingDaemon, end_process
from perfetto_testing._traces import read_upstream_trace
from perfetto_testing._wait import SLOW_TIMEOUT, TIMEOUT, wait_for

__all__ = [
    "CHROMIUM",
    "ROW_PREFIX",
    "SLOW_TIMEOUT",
    "TIMEOUT",
    "NotifyingDaemon",
    "OpenedPage",
    "end_process",
    "loop_instructions",
    "open_page",
    "read_upstream_trace",
    "report_row",
    "screenshot",
    "wait_for",
]
