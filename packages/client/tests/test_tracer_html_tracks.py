"""The HTML report's timeline of the program's own instants and counters, `pytest
--perfetto-html`'s flame graph per test, and a trace of a million distinct names: looked at in
headless Chromium from file://."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from perfetto_testing import OpenedPage, open_page, screenshot
from test_tracer_html import (
    RENDER_BUDGET_MS,
    _frames,
    _perfetto_trace,
    _pytest_perfetto_html,
)
from tracer_support import BIN, HOOKS, require_compiled_hook, run_traced

EVENTS = """\
import time

import perfetto_client as pc


def step():
    time.sleep(0.002)


with pc.trace_event("app", "load"):
    for depth in [3, 17, 42, 8, 0]:
        pc.counter("app", "queue depth", depth)
        step()
    pc.instant("app", "checkpoint reached")
    step()
pc.counter("app", "ratio", 0.25)
step()
pc.counter("app", "ratio", -1.5)
time.sleep(0.02)
"""


def _rendered(opened: OpenedPage) -> float:
    opened.page.wait_for_selector("body[data-rendered]")
    rendered_ms = float(opened.page.evaluate("document.body.dataset.rendered"))
    assert rendered_ms <= RENDER_BUDGET_MS, f"rendered in {rendered_ms:.0f} ms"
    return rendered_ms


def _timeline_names(opened: OpenedPage) -> set[str]:
    """The names of the slices drawn in the timeline."""
    names: list[str] = opened.page.evaluate(
        "() => [...document.querySelectorAll('#timeline .slice')].map(s => s.dataset.name)"
    )
    return set(names)


def _tip(opened: OpenedPage) -> str:
    text: str = opened.page.locator("#tip").inner_text()
    return text


def test_the_timeline_shows_the_program_s_counters_and_instants(tmp_path: Path) -> None:
    proc, trace = run_traced(tmp_path, EVENTS, options=("--html", "events.html"))
    assert proc.returncode == 0, proc.stderr
    with open_page(trace.parent / "events.html") as opened:
        _rendered(opened)
        page = opened.page
        depth = page.locator("#timeline .row.counter[data-counter='queue depth']")
        assert depth.locator(".label").inner_text() == "queue depth"
        assert depth.locator(".range").inner_text() == "max 42, min 0, 5 values"
        ratio = page.locator("#timeline .row.counter[data-counter='ratio']")
        assert ratio.locator(".range").inner_text() == "max 0.25, min -1.5, 2 values"
        box = ratio.locator("canvas").bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] - 2, box["y"] + 5)
        assert _tip(opened).startswith("ratio = -1.5\nsince ")
        # (On 3.12+ the recorder also marks the exceptions caught while importing: ticks too,
        # some of them close enough to stay in view after the zoom below.)
        checkpoint = "#timeline .row.instants .tick[data-name='checkpoint reached']"
        [tick] = page.locator(checkpoint).all()
        tick.hover()
        assert _tip(opened).startswith("checkpoint reached\nat ")
        # The program's own slice is in the timeline too.
        assert "load" in _timeline_names(opened)
        # Zooming in around the tick keeps it where it was; the axis shows less time.
        before = tick.bounding_box()
        assert before is not None
        axis = page.locator("#timeline .axis").inner_text()
        page.mouse.move(before["x"] + 1, before["y"] + 5)
        for _ in range(5):
            page.mouse.wheel(0, -100)
        page.wait_for_function(
            "(axis) => document.querySelector('#timeline .axis').innerText !== axis", arg=axis
        )
        [zoomed] = page.locator(checkpoint).all()
        after = zoomed.bounding_box()
        assert after is not None
        assert abs(after["x"] - before["x"]) < 3
        assert page.locator("#timeline .row.counter").count() == 2
        assert opened.errors == []
        assert opened.network == []


TWO_TESTS = """\
import time


def alpha_work():
    time.sleep(0.03)
    return sum(range(1000))


def beta_work():
    time.sleep(0.03)
    return sorted(range(1000), reverse=True)


def test_a():
    assert alpha_work() > 0


def test_b():
    assert beta_work()[0] == 999
"""


def _names_shown(opened: OpenedPage) -> set[str]:
    return {str(f["name"]).rsplit(".", 1)[-1] for f in _frames(opened)}


def test_pytest_perfetto_html_has_a_flame_graph_per_test(tmp_path: Path) -> None:
    html = _pytest_perfetto_html(tmp_path, TWO_TESTS)
    with open_page(html) as opened:
        _rendered(opened)
        page = opened.page
        everything = _names_shown(opened)
        assert {"alpha_work", "beta_work"} <= everything
        tests = page.locator("#stack optgroup option").all_inner_texts()
        assert tests == ["tests/test_sample.py::test_a", "tests/test_sample.py::test_b"]
        page.select_option("#stack", label="tests/test_sample.py::test_a")
        shown = _names_shown(opened)
        assert "alpha_work" in shown
        assert "beta_work" not in shown
        assert "test_a" in shown
        page.select_option("#stack", label="tests/test_sample.py::test_b")
        shown = _names_shown(opened)
        assert "beta_work" in shown
        assert "alpha_work" not in shown
        # The timeline of the run: the tests are slices.
        names = _timeline_names(opened)
        assert {"tests/test_sample.py::test_a", "tests/test_sample.py::test_b"} <= names
        assert page.locator("#incomplete").is_hidden()
        assert opened.errors == []
        assert opened.network == []


MILLION_NAMES = """\
import sys

from perfetto_client import begin, end
from perfetto_client._tracer._sink import FileSink
from perfetto_client._tracer._sink_track_events import SinkTrackEvents

sink = FileSink(sys.argv[1], b"")
events = SinkTrackEvents(sink)
events.start()
for i in range(int(sys.argv[2])):
    begin("app", f"name {i}")
    end("app")
events.stop()
sink.close()
"""
# The pure build takes minutes to write and read a million (both builds fold alike: its
# tenth is still 20x the names cap).
DISTINCT_NAMES = 100_000 if os.environ.get("PERFETTO_PY_PURE") else 1_000_000
PAGE_BUDGET = 5_000_000


def test_a_million_distinct_names_stay_within_the_size_goal(tmp_path: Path) -> None:
    trace, html = tmp_path / "names.pftrace", tmp_path / "names.html"
    script = tmp_path / "names.py"
    script.write_text(MILLION_NAMES)
    subprocess.run(
        [str(BIN / "python"), str(script), str(trace), str(DISTINCT_NAMES)],
        check=True,
        timeout=600,
    )
    started = time.monotonic()
    proc = _perfetto_trace("report", "--html", str(html), str(trace), cwd=tmp_path.parent)
    written_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    folded = DISTINCT_NAMES - 5000
    assert f"perfetto-trace: {folded:,} functions beyond the 5,000 longest" in proc.stderr
    size = html.stat().st_size
    with open_page(html) as opened:
        rendered_ms = _rendered(opened)
        frames = _frames(opened)
        [other] = [f for f in frames if f["name"] == "other"]
        assert other["depth"] == 1
        said = opened.page.locator("#folded").inner_text()
        assert f"{folded:,} functions beyond the 5,000 longest are drawn as 'other'" in said
        assert opened.errors == []
        assert opened.network == []
    print(
        f"{DISTINCT_NAMES:,} names: trace {trace.stat().st_size / 1e6:.1f} MB, page "
        f"{size / 1e6:.2f} MB written in {written_s:.1f} s, rendered in {rendered_ms:.0f} ms"
    )
    assert size <= PAGE_BUDGET
    if DISTINCT_NAMES > 200_000:
        past = DISTINCT_NAMES - 200_000
        assert f"{past:,} top-level calls past the first 200,000 are not in the timeline" in said


PAGE_DATA = """\
import json
import sys

from perfetto_client._tracer import _call_tree
from perfetto_client._tracer._html_report import html_data

tree, truncated = _call_tree.read_call_tree(sys.argv[1], 20, segments=frozenset({"load"}))
print(json.dumps([_call_tree.__file__.endswith(".py"), html_data("t", tree, truncated, 20)]))
"""


@pytest.mark.skipif("compiled" not in HOOKS, reason="PERFETTO_PY_PURE=1: one build only")
def test_both_builds_make_the_same_page(tmp_path: Path) -> None:
    require_compiled_hook()
    proc, trace = run_traced(tmp_path, EVENTS)
    assert proc.returncode == 0, proc.stderr
    pages = []
    for pure in (False, True):
        env = {k: v for k, v in os.environ.items() if k != "PERFETTO_PY_PURE"}
        if pure:
            env["PERFETTO_PY_PURE"] = "1"
        out = subprocess.run(
            [str(BIN / "python"), "-c", PAGE_DATA, str(trace)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        was_pure, data = json.loads(out.stdout)
        assert was_pure == pure
        pages.append(data)
    compiled, pure_page = pages
    assert compiled["counters"]
    assert compiled["instants"]
    assert compiled["segments"]
    assert compiled == pure_page


def test_the_timeline_screenshot_is_not_blank(tmp_path: Path) -> None:
    proc, trace = run_traced(tmp_path, EVENTS, options=("--html", "events.html"))
    assert proc.returncode == 0, proc.stderr
    with open_page(trace.parent / "events.html") as opened:
        _rendered(opened)
        canvas = opened.page.locator("#timeline .row.counter[data-counter='queue depth'] canvas")
        box = canvas.bounding_box()
        assert box is not None
        opened.page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + 10)
        opened.page.locator("#timeline").scroll_into_view_if_needed()
        png = tmp_path / "perfetto-trace-html-timeline.png"
        assert screenshot(opened, png) > 20
        assert opened.errors == []
