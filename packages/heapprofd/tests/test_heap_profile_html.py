"""`heap_profile --html OUT.html`: the profile of a real program as a flame graph page, looked at
in headless Chromium from file:// and checked against an independent decoding of the trace."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from perfetto_protos.upstream import parse_upstream_trace
from perfetto_testing import OpenedPage, open_page, screenshot
from test_heap_profile_cli import _heap_profile, _private_env

PROGRAM = """\
kept = []

def keep():
    for _ in range(2000):
        kept.append(bytearray(1000))

def churn():
    for _ in range(6000):
        data = bytearray(1000)
        del data

def little():
    kept.append([bytearray(5000) for _ in range(20)])

keep()
churn()
little()
"""
# Set by `nox -s screenshots`: the directory where the docs' screenshots go.
PERFETTO_TRACE = str(Path(sys.executable).with_name("perfetto-trace"))


@dataclass
class Profiled:
    trace: Path
    html: Path
    stderr: str


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    tmp_path = tmp_path_factory.mktemp("heap_html")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "prog.py").write_text(PROGRAM)
    work = tmp_path / "work"
    work.mkdir()
    result = _heap_profile(
        "-o", "heap.pftrace", "--html", "heap.html", "--", "../src/prog.py",
        cwd=work, env=_private_env(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return Profiled(work / "heap.pftrace", work / "heap.html", result.stderr)


def _last_dump_totals(trace: bytes, heap: str) -> dict[str, int]:
    """Upstream's schema (PyPI `perfetto`): the last whole dump of the one process's `heap`,
    its samples summed as trace_processor's latest snapshot: self_allocated - self_freed,
    self_allocated and alloc_count."""
    parsed: Any = parse_upstream_trace(trace)
    current: list[Any] = []
    last: list[Any] = []
    for packet in parsed.packet:
        if packet.HasField("profile_packet"):
            current += [d for d in packet.profile_packet.process_dumps if d.heap_name == heap]
            if not packet.profile_packet.continued:
                last, current = current, []
    assert last, f"no dump of heap {heap}"
    assert len({d.pid for d in last}) == 1
    samples = [s for d in last for s in d.samples]
    return {
        "u": sum(s.self_allocated - s.self_freed for s in samples),
        "a": sum(s.self_allocated for s in samples),
        "c": sum(s.alloc_count for s in samples),
    }


@pytest.fixture
def page(profiled: Profiled) -> Iterator[OpenedPage]:
    with open_page(profiled.html) as opened:
        opened.page.wait_for_selector("body[data-rendered]")
        yield opened
        assert opened.errors == []
        assert opened.network == []


def _frames(opened: OpenedPage) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = opened.page.evaluate(
        """() => [...document.querySelectorAll('#flame .frame')].map(f => ({
            name: f.dataset.name, depth: Number(f.dataset.depth),
            total: Number(f.dataset.total), width: f.getBoundingClientRect().width}))"""
    )
    return frames


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    assert found is not None, f"{pattern!r} is not in {text!r}"
    return int(found[1].replace(",", ""))


def test_the_command_says_it_wrote_the_page(profiled: Profiled) -> None:
    # the paths as given, as the trace's line has it
    assert profiled.stderr.endswith("heap_profile: wrote heap.html\n")


def test_the_top_frame_holds_the_unreleased_bytes_of_the_trace(
    page: OpenedPage, profiled: Profiled
) -> None:
    expected = _last_dump_totals(profiled.trace.read_bytes(), "python")
    assert expected["u"] > 1_500_000  # keep()'s 2,000 kB are there: nothing vacuous
    assert page.page.locator("#stack").input_value() == "h0"
    assert "heap python of pid" in page.page.locator("#stack option:checked").inner_text()
    assert page.page.locator("#metric").input_value() == "u"
    [top] = [f for f in _frames(page) if f["depth"] == 0]
    assert top["total"] == expected["u"]
    page.page.locator("#flame .frame").first.hover()
    tip = page.page.locator("#tip").inner_text()
    assert _number(r"unreleased ([\d,]+) B", tip) == expected["u"]
    assert _number(r"allocated ([\d,]+) B", tip) == expected["a"]
    assert f"{expected['u']:,} bytes unreleased" in page.page.locator("#summary").inner_text()
    assert page.page.locator("#incomplete").is_hidden()
    assert page.page.locator("#timeline").is_hidden()


def test_the_function_that_keeps_memory_is_the_widest_at_its_depth(page: OpenedPage) -> None:
    frames = _frames(page)
    [keep] = [f for f in frames if f["name"] == "keep"]
    rivals = [f for f in frames if f["depth"] == keep["depth"] and f is not keep]
    # little()'s allocations are each over the 4,096-byte interval: every one is sampled
    assert any(f["name"] == "little" for f in rivals)
    assert all(keep["width"] > f["width"] for f in rivals)
    page.page.locator("#flame .frame", has_text=re.compile("^keep$")).first.hover()
    assert "prog.py:5" in page.page.locator("#tip").inner_text()


def test_counts_change_the_numbers_and_the_picture(page: OpenedPage, profiled: Profiled) -> None:
    expected = _last_dump_totals(profiled.trace.read_bytes(), "python")
    page.page.select_option("#metric", "c")
    frames = _frames(page)
    [top] = [f for f in frames if f["depth"] == 0]
    assert top["total"] == expected["c"] != expected["u"]
    widths = {f["name"]: f["width"] for f in frames}
    assert widths["churn"] > widths["keep"]  # 6,000 allocations against 2,000
    page.page.select_option("#metric", "a")
    assert next(f for f in _frames(page) if f["depth"] == 0)["total"] == expected["a"]


def test_the_text_report_says_what_the_trace_holds(profiled: Profiled) -> None:
    expected = _last_dump_totals(profiled.trace.read_bytes(), "python")
    result = subprocess.run(
        [PERFETTO_TRACE, "report", str(profiled.trace)],
        capture_output=True, text=True, check=False, timeout=120, cwd=profiled.trace.parent.parent,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [row] = [line for line in result.stdout.splitlines() if " python " in line]
    assert row.split()[2] == f"{expected['u']:,}"
    assert row.split()[3] == f"{expected['a']:,}"
    assert row.split()[4] == f"{expected['c']:,}"
    assert "Functions by total time" not in result.stdout


def test_the_heap_screenshot_is_not_blank(page: OpenedPage, tmp_path: Path) -> None:
    page.page.locator("#flame .frame", has_text=re.compile("^keep$")).first.hover()
    png = tmp_path / "heap-profile-html.png"
    assert screenshot(page, png) > 20


def test_a_truncated_heap_trace_gives_a_page_marked_incomplete(
    profiled: Profiled, tmp_path: Path
) -> None:
    data = profiled.trace.read_bytes()
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(data[: len(data) // 2])
    html = tmp_path / "cut.html"
    result = subprocess.run(
        [PERFETTO_TRACE, "report", "--html", str(html), str(cut)],
        capture_output=True, text=True, check=False, timeout=120, cwd=tmp_path.parent,
    )  # fmt: skip
    assert result.returncode == 1
    assert f"perfetto-trace: wrote {html} (marked incomplete)" in result.stderr
    with open_page(html) as opened:
        opened.page.wait_for_selector("body[data-rendered]")
        assert opened.page.locator("#incomplete").is_visible()
        assert "is truncated" in opened.page.locator("#incomplete").inner_text()
        assert opened.page.title().startswith("INCOMPLETE")
        assert opened.errors == []
        assert opened.network == []
