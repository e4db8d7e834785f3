"""`perfetto-trace report --html OUT.html FILE`, looked at in headless Chromium from file://:
what a user sees of the flame graph, the timeline, the table and the incomplete markers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from perfetto_testing import OpenedPage, open_page, screenshot
from tracer_support import BIN, run_traced

PERFETTO_TRACE = str(BIN / "perfetto-trace")

PROGRAM = """\
import threading
import time

def hot():
    time.sleep(0.06)

def cold():
    time.sleep(0.01)

def helper():
    cold()

def spin():
    time.sleep(0.01)

def worker():
    for _ in range(2):
        spin()

def main():
    for _ in range(3):
        hot()
    helper()
    for _ in range(2):
        cold()
    t = threading.Thread(target=worker, name="worker")
    t.start()
    t.join()

main()
"""

# A page that renders in a few hundred ms; the bound catches a blow-up, not a loaded machine.
RENDER_BUDGET_MS = 10_000
# Set by `nox -s screenshots`: the directory where the docs' screenshots go.


def _perfetto_trace(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PERFETTO_TRACE, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("html")
    proc, out = run_traced(tmp_path, PROGRAM)
    assert proc.returncode == 0, proc.stderr
    return out


def _text_total_ms(trace: Path, name: str) -> float:
    """TOTAL ms of `name` as `perfetto-trace report` prints it."""
    proc = _perfetto_trace("report", "--limit", "1000", str(trace), cwd=trace.parent.parent)
    assert proc.returncode == 0, proc.stderr
    for line in proc.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 5 and cells[4] == name:
            return float(cells[1].replace(",", ""))
    raise AssertionError(f"{name} is not in the report:\n{proc.stdout}")


@pytest.fixture
def page(recorded: Path, tmp_path: Path) -> Iterator[OpenedPage]:
    html = tmp_path / "out.html"
    proc = _perfetto_trace("report", "--html", str(html), str(recorded), cwd=tmp_path.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == f"perfetto-trace: wrote {html}\n"
    started = time.monotonic()
    with open_page(html) as opened:
        opened.page.wait_for_selector("body[data-rendered]")
        rendered_ms = float(opened.page.evaluate("document.body.dataset.rendered"))
        assert rendered_ms <= RENDER_BUDGET_MS, f"rendered in {rendered_ms:.0f} ms"
        assert time.monotonic() - started < 60
        yield opened
        assert opened.errors == []
        assert opened.network == []


def _frames(opened: OpenedPage) -> list[dict[str, object]]:
    """The flame graph's frames on screen: name, depth, width (px), matched by the search."""
    frames: list[dict[str, object]] = opened.page.evaluate(
        """() => [...document.querySelectorAll('#flame .frame')].map(f => ({
            name: f.dataset.name, depth: Number(f.dataset.depth),
            width: f.getBoundingClientRect().width, match: f.classList.contains('match')}))"""
    )
    return frames


def _number(pattern: str, text: str) -> float:
    """The number that the first group of `pattern` finds in `text` (commas dropped)."""
    found = re.search(pattern, text)
    assert found is not None, f"{pattern!r} is not in {text!r}"
    return float(found[1].replace(",", ""))


def _tooltip(opened: OpenedPage, name: str) -> str:
    frame = opened.page.locator("#flame .frame", has_text=re.compile(f"^{name}$")).first
    frame.hover()
    text: str = opened.page.locator("#tip").inner_text()
    return text


def test_the_hot_function_is_the_widest_frame_at_its_depth(
    page: OpenedPage, recorded: Path, tmp_path: Path
) -> None:
    frames = _frames(page)
    [hot] = [f for f in frames if f["name"] == "hot"]
    # Thread.start and Thread.join wait for the worker thread: their width is how soon a
    # loaded machine runs it. The others' is their own work.
    waiting = {"threading.Thread.start", "threading.Thread.join"}
    at_depth = [f for f in frames if f["depth"] == hot["depth"] and f is not hot]
    assert waiting <= {f["name"] for f in at_depth}
    rivals = [f for f in at_depth if f["name"] not in waiting]
    assert {"helper", "cold"} <= {f["name"] for f in rivals}
    assert all(float(hot["width"]) > float(f["width"]) for f in rivals)  # type: ignore[arg-type]
    tip = _tooltip(page, "hot")
    shown = _number(r"total ([\d,.]+) ms", tip)
    assert shown == pytest.approx(_text_total_ms(recorded, "hot"), rel=1e-3)
    assert "prog.py:4" in tip
    assert "calls 3" in tip


def test_search_highlights_exactly_the_matching_frames(page: OpenedPage, recorded: Path) -> None:
    page.page.fill("#search", "cold")
    frames = _frames(page)
    matching = [f for f in frames if "cold" in str(f["name"]).lower()]
    assert len(matching) == 2  # under main and under helper
    assert [f for f in frames if f["match"]] == matching
    said = page.page.locator("#matches").inner_text()
    assert said.startswith("2 frames match, ")
    share = _number(r"([\d.]+) %", said)
    everything = _number(r"total ([\d,.]+) ms", _tooltip(page, "all.*"))
    assert share == pytest.approx(100 * _text_total_ms(recorded, "cold") / everything, abs=0.1)


def test_a_click_zooms_into_the_frame(page: OpenedPage) -> None:
    before = {f["name"] for f in _frames(page)}
    assert "hot" in before
    page.page.locator("#flame .frame", has_text=re.compile("^helper$")).first.click()
    after = _frames(page)
    assert "hot" not in {f["name"] for f in after}
    [helper] = [f for f in after if f["name"] == "helper"]
    [cold] = [f for f in after if f["name"] == "cold"]
    width = page.page.evaluate("document.getElementById('flame').clientWidth")
    assert float(helper["width"]) == pytest.approx(width, rel=0.01)  # type: ignore[arg-type]
    # cold is helper's only callee: nearly all of it (helper's own time is the rest, a few
    # percent where the recorder is pure or the machine loaded).
    assert 0.9 * width < float(cold["width"]) <= float(helper["width"])  # type: ignore[arg-type]
    page.page.click("#reset")
    assert {f["name"] for f in _frames(page)} == before


def test_the_timeline_and_the_table(page: OpenedPage, tmp_path: Path) -> None:
    labels = page.page.locator("#timeline .label").all_inner_texts()
    assert any(label.startswith("MainThread") for label in labels)
    assert any(label.startswith("worker") for label in labels)
    assert page.page.locator("#timeline .slice").count() >= 2
    first = page.page.locator("#functions tbody tr td.name").first.inner_text()
    assert first == "<module __main__>"
    page.page.click("#functions th[data-key=name]")
    names = page.page.locator("#functions tbody tr td.name").all_inner_texts()
    assert names == sorted(names)
    assert page.page.locator("#incomplete").is_hidden()


def test_the_screenshot_is_not_blank(page: OpenedPage, tmp_path: Path) -> None:
    page.page.fill("#search", "cold")
    page.page.locator("#flame .frame", has_text=re.compile("^hot$")).first.hover()
    png = tmp_path / "perfetto-trace-html.png"
    assert screenshot(page, png) > 20


def test_a_truncated_trace_gives_a_picture_marked_incomplete(
    recorded: Path, tmp_path: Path
) -> None:
    cut = tmp_path / "cut.pftrace"
    data = recorded.read_bytes()
    cut.write_bytes(data[: len(data) - 100])
    html = tmp_path / "cut.html"
    proc = _perfetto_trace("report", "--html", str(html), str(cut), cwd=tmp_path.parent)
    assert proc.returncode == 1
    assert f"perfetto-trace: wrote {html} (marked incomplete)" in proc.stderr
    assert f"{cut} is truncated: the packet at offset" in proc.stderr
    with open_page(html) as opened:
        opened.page.wait_for_selector("body[data-rendered]")
        banner = opened.page.locator("#incomplete")
        assert banner.is_visible()
        assert "is truncated" in banner.inner_text()
        assert opened.page.title().startswith("INCOMPLETE")
        assert "hot" in {f["name"] for f in _frames(opened)}
        assert screenshot(opened, tmp_path / "cut.png") > 20
        assert opened.errors == []
        assert opened.network == []


def test_not_a_trace_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pftrace"
    bad.write_bytes(b"hello")
    html = tmp_path / "bad.html"
    proc = _perfetto_trace("report", "--html", str(html), str(bad), cwd=tmp_path.parent)
    assert proc.returncode == 1
    assert proc.stderr == (
        f"perfetto-trace: {bad} is not a Perfetto trace (it begins with byte 0x68, not a "
        "TracePacket)\n"
    )
    assert not html.exists()


MANY_NAMES = """\
import time
source = "".join(f"def f{i}():\\n    return {i}\\n" for i in range(20_000))
space = {}
exec(compile(source, "many.py", "exec"), space)
for i in range(20_000):
    space[f"f{i}"]()
time.sleep(0.01)
"""


def test_names_past_the_cap_are_one_frame_other(tmp_path: Path) -> None:
    proc, trace = run_traced(tmp_path, MANY_NAMES, options=("--no-c-calls",))
    assert proc.returncode == 0, proc.stderr
    html = tmp_path / "many.html"
    proc = _perfetto_trace("report", "--html", str(html), str(trace), cwd=tmp_path.parent)
    assert proc.returncode == 0, proc.stderr
    report = _perfetto_trace("report", "--json", str(trace), cwd=tmp_path)
    folded = json.loads(report.stdout)["functions"] - 5000
    assert folded > 15_000
    assert proc.stderr == (
        f"perfetto-trace: wrote {html}\n"
        f"perfetto-trace: {folded:,} functions beyond the 5,000 longest are drawn as 'other'\n"
    )
    assert html.stat().st_size < 1_000_000
    with open_page(html) as opened:
        opened.page.wait_for_selector("body[data-rendered]")
        assert float(opened.page.evaluate("document.body.dataset.rendered")) <= RENDER_BUDGET_MS
        assert "other" in {f["name"] for f in _frames(opened)}
        assert "drawn as 'other'" in opened.page.locator("#folded").inner_text()
        assert opened.page.locator("#incomplete").is_hidden()
        assert opened.errors == []
        assert opened.network == []


def test_run_html_writes_the_page_beside_the_trace(tmp_path: Path) -> None:
    proc, trace = run_traced(tmp_path, PROGRAM, options=("--html", "page.html"))
    assert proc.returncode == 0, proc.stderr
    html = trace.parent / "page.html"
    assert f"perfetto-trace: wrote {html}\n" in proc.stderr
    with open_page(html) as opened:
        opened.page.wait_for_selector("body[data-rendered]")
        assert "hot" in {f["name"] for f in _frames(opened)}
        assert opened.page.locator("#incomplete").is_hidden()
        assert opened.errors == []
        assert opened.network == []


def test_run_html_shows_what_the_size_cap_cut(tmp_path: Path) -> None:
    program = "def f():\n    pass\nfor _ in range(400_000):\n    f()\n"
    proc, trace = run_traced(tmp_path, program, options=("--max-size", "2", "--html", "cap.html"))
    assert proc.returncode == 0, proc.stderr
    assert trace.stat().st_size <= 2 << 20
    with open_page(trace.parent / "cap.html") as opened:
        opened.page.wait_for_selector("body[data-rendered]")
        banner = opened.page.locator("#incomplete").inner_text()
        assert "the size cap of 2 MiB was reached" in banner
        assert opened.errors == []


TESTS = """\
import time

def slow_helper():
    time.sleep(0.03)

def test_slow():
    slow_helper()

def test_quick():
    pass
"""


def _pytest_perfetto_html(tmp_path: Path, tests: str) -> Path:
    """Runs `pytest --perfetto ... --perfetto-calls --perfetto-html` as a user types it on a
    project whose one test file holds `tests`; the page it wrote."""
    (tmp_path / "project" / "tests").mkdir(parents=True)
    (tmp_path / "project" / "tests" / "test_sample.py").write_text(tests)
    out, html = tmp_path / "run.pftrace", tmp_path / "run.html"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    options = ["--perfetto", str(out), "--perfetto-calls", "--perfetto-html", str(html)]
    proc = subprocess.run(
        [str(BIN / "pytest"), "-p", "no:cacheprovider", "-p", "no:randomly", *options, "tests"],
        cwd=tmp_path / "project",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=clean,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"perfetto-trace: wrote {html}\n" in proc.stdout
    return html


def test_pytest_perfetto_html_writes_the_run_s_page(tmp_path: Path) -> None:
    html = _pytest_perfetto_html(tmp_path, TESTS)
    with open_page(html) as opened:
        opened.page.wait_for_selector("body[data-rendered]")
        names = {str(f["name"]) for f in _frames(opened)}
        assert any(name.endswith("slow_helper") for name in names), names
        assert opened.page.locator("#timeline .slice").count() >= 1
        assert opened.page.locator("#incomplete").is_hidden()
        assert opened.errors == []
        assert opened.network == []


def test_paths_past_the_cap_fold_into_other_and_keep_their_time(recorded: Path) -> None:
    from perfetto_client._tracer._call_tree import read_call_tree
    from perfetto_client._tracer._html_report import html_data

    def data(max_paths: int) -> dict[str, Any]:
        tree, truncated = read_call_tree(str(recorded), 20, max_paths)
        assert truncated == ""
        return html_data(str(recorded), tree, truncated, 20)

    whole = data(300_000)
    assert whole["folded"] == []
    folded = data(4)
    assert [s["tree"]["t"][0] for s in folded["stacks"]] == [
        s["tree"]["t"][0] for s in whole["stacks"]
    ]
    assert len(folded["stacks"][0]["tree"]["n"]) < len(whole["stacks"][0]["tree"]["n"])
    [line] = [line for line in folded["folded"] if "on call paths past the first 4 " in line]
    assert line.endswith("are drawn as 'other' under their callers")
