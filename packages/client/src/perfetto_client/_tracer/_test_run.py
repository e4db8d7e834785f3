"""A pytest run as a Perfetto trace (`pytest --perfetto OUT.pftrace`).

Each test is a slice named by its node id on the thread that runs it, with child slices
`setup`, `call` and `teardown`; the test's end carries the debug annotation `outcome`
(passed, failed, skipped, error), and an exception that ends a phase (other than a skip) is an
instant inside it. These are the client API's track events, written into perfetto-trace's
file sink; with `--perfetto-calls`, perfetto-trace's recorder records every call into the same
sink. Under pytest-xdist each worker records its own part file and the controller joins them
into the one trace (a process track per worker).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, BinaryIO

import pytest

from perfetto_client import _tracks, begin, end, instant, trace_event
from perfetto_client._categories import Category
from perfetto_client._errors import TracingError
from perfetto_client._tracer._options import DEFAULT_MAX_SIZE_MB, TraceOptions
from perfetto_client._tracer._sink import FileSink, Sink, SinkStats
from perfetto_client._tracer._sink_track_events import SinkTrackEvents
from perfetto_client._tracer._summary import Summary

if TYPE_CHECKING:
    from perfetto_client._tracer._recording import Recording

_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
_MESSAGE_CHARS = 1000
_SEQUENCES_PER_WORKER = 256
_PLUGIN_NAME = "perfetto-test-run"


def start_test_run(
    config: pytest.Config,
    output: str,
    calls: bool,
    max_size_mb: float | None,
    html: str | None = None,
) -> None:
    """Starts recording this pytest process (or, in pytest-xdist's controller, its workers)
    into a trace of at most `max_size_mb` MiB (0: no cap; None: `perfetto-trace run`'s);
    its HTML report is written to `html` at the end when given."""
    path = os.path.abspath(output)
    if max_size_mb is None:
        max_size_mb = DEFAULT_MAX_SIZE_MB
    max_bytes = int(max_size_mb * (1 << 20))
    if config.pluginmanager.hasplugin("dsession"):
        plugin: _TestRun | _Controller = _Controller(path, max_bytes)
    else:
        worker = getattr(config, "workerinput", {}).get("workerid")
        plugin = _TestRun(config, path, calls, worker, max_bytes)
        plugin.start()
    plugin.html = html
    config.pluginmanager.register(plugin, _PLUGIN_NAME)


def _part_path(path: str, worker: str) -> str:
    """Where worker `worker` records its part of the trace at `path`."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{worker}.part")


def _type_name(kind: type) -> str:
    name = kind.__qualname__
    return name if kind.__module__ in ("builtins", "__main__") else f"{kind.__module__}.{name}"


def _print_summary(
    summary: Summary, terminal: Any, html: str | None, tests: frozenset[str]
) -> None:
    lines = summary.lines()
    if html is not None:
        lines += _html_report(summary, html, tests)
    if terminal is None:
        for line in lines:
            print(line, file=sys.stderr)
        return
    terminal.write_sep("-", "perfetto")
    for line in lines:
        terminal.write_line(line)


def _html_report(summary: Summary, html: str, tests: frozenset[str]) -> list[str]:
    """Writes the trace's HTML report to `html`, with a flame graph per test (those named in
    `tests`); the lines that say so."""
    from perfetto_client._tracer._html_report import write_html_report
    from perfetto_client._tracer._report import ReportError

    lost = summary.lines()[0].removeprefix("perfetto-trace: ")
    try:
        lacks, folded, _ = write_html_report(
            summary.path,
            html,
            20,
            [lost] if summary.events_lost or summary.partial else [],
            tests,
        )
    except (ReportError, OSError) as exc:
        return [f"perfetto-trace: no HTML report: {exc}"]
    incomplete = " (marked incomplete)" if lacks else ""
    return [f"perfetto-trace: wrote {os.path.abspath(html)}{incomplete}"] + [
        f"perfetto-trace: {line}" for line in lacks + folded
    ]


def _fail_if_incomplete(session: pytest.Session, summary: Summary | None) -> None:
    """A run whose trace is partial (a write error, the size cap) does not exit 0 (pytest's
    status 3)."""
    if summary is not None and summary.partial and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


class _TestRun:
    """The recording of one process that runs tests (pytest itself, or an xdist worker)."""

    def __init__(
        self, config: pytest.Config, path: str, calls: bool, worker: str | None, max_bytes: int
    ) -> None:
        self.config = config
        self.max_bytes = max_bytes
        self.path = path
        self.output = _part_path(path, worker) if worker else path
        self.calls = calls
        self.worker = worker
        self.summary: Summary | None = None
        self.html: str | None = None
        self.tests: set[str] = set()  # the node ids of the tests run
        self._reported = False
        self._outcome = "passed"
        self._recording: Recording | None = None
        self._sink: Sink | None = None
        self._started_ns = self._stopped_ns = 0
        self._events: SinkTrackEvents | None = None

    def start(self) -> None:
        # `pytest`, `python -m pytest` or a worker's `python -c ...`: named after what it runs.
        name = f"pytest-xdist worker {self.worker}" if self.worker else "pytest"
        _tracks.set_process_name(name)
        self._category = Category("pytest", "pytest's run: tests and their phases")
        if self.calls:
            # The recorder loads only here: its modules (7 ms of CPU) cost more than a small
            # test run.
            from perfetto_client._tracer._recording import Recording

            # No builtin calls: pluggy runs the hook wrappers that begin and end the test
            # slices through next() and send(), whose slices they would straddle.
            options = TraceOptions(
                output=self.output,
                client_events=False,
                c_calls=False,
                max_size_mb=self.max_bytes / (1 << 20),
            )
            self._recording = Recording(options)
            try:
                self._recording.start()
            except TracingError as exc:
                raise pytest.UsageError(f"--perfetto: {exc}") from None
            assert self._recording.engine is not None
            sink: Sink = self._recording.engine.sink
        else:
            try:
                # No header: the track events' sequences describe the process themselves.
                sink = FileSink(self.output, b"", max_bytes=self.max_bytes)
            except OSError as exc:
                raise pytest.UsageError(
                    f"--perfetto: can't write {self.output!r}: {exc.strerror or exc}"
                ) from None
        self._sink = sink
        self._started_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        index = self.worker[2:] if self.worker else "0"
        first = 1 + (int(index) if index.isdigit() else 0) * _SEQUENCES_PER_WORKER
        self._events = SinkTrackEvents(sink, first)
        self._events.start()

    def stop(self) -> None:
        """Ends the recording and the trace file (once)."""
        events, self._events = self._events, None
        if events is None:
            return
        events.stop()
        self._stopped_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        if self._recording is not None:
            summary = self._recording.stop()
        else:
            assert isinstance(self._sink, FileSink)
            try:
                stats = self._sink.close()
            except OSError as exc:
                events.write_error = events.write_error or exc
                stats = self._sink.stats
            summary = Summary(
                stats.path,
                stats.bytes_written,
                stats.events_written,
                stats.events_lost,
                stats.lost_reason,
                self._stopped_ns - self._started_ns,
                1,
                cut=stats.cut(),
            )
        if events.write_error is not None:
            error = events.write_error
            summary.lost_reason = (
                f"recording stopped: writing {self.output}: {error.strerror or error}; "
                "the trace is incomplete"
            )
            summary.incomplete = True
        if events.late_events:
            summary.events_lost += events.late_events
            summary.lost_reason = summary.lost_reason or "written after the recording stopped"
        self.summary = summary

    # ---- the run -----------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_collection(self, session: pytest.Session) -> Generator[None, object, object]:
        with trace_event(self._category, "collection"):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        self._outcome = "passed"
        self.tests.add(item.nodeid)
        begin(self._category, item.nodeid)
        self._in_file_order()
        try:
            return (yield)
        finally:
            end(self._category, outcome=self._outcome)
            self._in_file_order()

    def _in_file_order(self) -> None:
        """For the HTML report's flame graph per test: the test's begin and end go into the
        file before the calls that follow them (the recorder writes its calls later)."""
        if self.html is not None and self._events is not None:
            self._events.flush()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._phase("setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._phase("call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        return (yield from self._phase("teardown"))

    def _phase(self, name: str) -> Generator[None, object, object]:
        begin(self._category, name)
        try:
            return (yield)
        except BaseException as exc:
            if not isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception)):
                instant(self._category, _type_name(type(exc)), message=str(exc)[:_MESSAGE_CHARS])
            raise
        finally:
            end(self._category)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped:
            outcome = "skipped"
        else:
            return
        if _RANK[outcome] > _RANK[self._outcome]:
            self._outcome = outcome

    # ---- the end -----------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.stop()
        _fail_if_incomplete(session, self.summary)
        if self.worker is not None and self.summary is not None:
            s = self.summary
            self.config.workeroutput["perfetto"] = {  # type: ignore[attr-defined]
                "part": self.output,
                "events": s.events_written,
                "lost": s.events_lost,
                "reason": s.lost_reason,
                "span": [self._started_ns, self._stopped_ns],
                "build": s.build,
                "incomplete": s.incomplete,
                "cut": s.cut,
            }

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.summary is not None and self.worker is None:
            _print_summary(self.summary, terminalreporter, self.html, frozenset(self.tests))
            self._reported = True

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.stop()
        if self.summary is not None and self.worker is None and not self._reported:
            _print_summary(self.summary, None, self.html, frozenset(self.tests))


class _Controller:
    """pytest-xdist's controller: joins its workers' parts into the trace at `path`."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._started = time.monotonic()
        self.summary: Summary | None = None
        self.html: str | None = None
        self.tests: set[str] = set()  # the node ids of the workers' tests
        self._parts: dict[str, dict[str, Any]] = {}
        self._missing: list[str] = []
        self._reported = False
        try:
            self._file: BinaryIO | None = open(path, "wb")  # noqa: SIM115 (joined at the end)
        except OSError as exc:
            raise pytest.UsageError(
                f"--perfetto: can't write {path!r}: {exc.strerror or exc}"
            ) from None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.tests.add(report.nodeid)

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        worker = str(node.gateway.id)
        part = getattr(node, "workeroutput", {}).get("perfetto")
        if part is None:
            self._missing.append(worker)
            with contextlib.suppress(OSError):
                os.unlink(_part_path(self.path, worker))
        else:
            self._parts[worker] = part

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.join()
        _fail_if_incomplete(session, self.summary)

    def join(self) -> None:
        """Writes the workers' parts into the trace, in worker order (once)."""
        out, self._file = self._file, None
        if out is None:
            return
        reasons = []
        cuts = []
        # The cap's time counts from the run's start: the cut happens here, at its end.
        stats = SinkStats(self.path, max_bytes=self.max_bytes, started=self._started)
        incomplete = False
        builds = set()
        joined = 0
        with out:
            for worker in sorted(self._parts, key=lambda w: (len(w), w)):
                part = self._parts[worker]
                stats.events_lost += part["lost"]
                try:
                    with open(part["part"], "rb") as f:
                        size = os.fstat(f.fileno()).st_size
                        if stats.admit(size, part["events"]):  # else counted at the cap
                            shutil.copyfileobj(f, out)
                            stats.bytes_written = out.tell()
                            stats.events_written += part["events"]
                            joined += 1
                except OSError as exc:
                    reasons.append(f"{worker}'s part: {exc.strerror or exc}")
                    stats.events_lost += part["events"]
                    incomplete = True
                incomplete |= part["incomplete"]
                if part["reason"]:
                    reasons.append(f"{worker}: {part['reason']}")
                if part["cut"]:
                    cuts.append(f"{worker}: {part['cut']}")
                if part["build"]:
                    builds.add(part["build"])
                with contextlib.suppress(OSError):
                    os.unlink(part["part"])
            size = out.tell()
        reasons += [
            f"worker {w} ended without its part: its tests are not in the trace"
            for w in self._missing
        ]
        starts = [p["span"][0] for p in self._parts.values()]
        stops = [p["span"][1] for p in self._parts.values()]
        self.summary = Summary(
            self.path,
            size,
            stats.events_written,
            stats.events_lost,
            "; ".join(reasons),
            max(stops, default=0) - min(starts, default=0),
            joined,
            build=builds.pop() if len(builds) == 1 else "",
            incomplete=incomplete,
            cut="; ".join(filter(None, (*cuts, stats.cut()))),
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.summary is not None:
            _print_summary(self.summary, terminalreporter, self.html, frozenset(self.tests))
            self._reported = True

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.join()
        if self.summary is not None and not self._reported:
            _print_summary(self.summary, None, self.html, frozenset(self.tests))
