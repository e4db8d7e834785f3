"""The README's performance table: rendered from docs/performance.json, each row printed by the
benchmark it names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import perf_table  # noqa: E402


def test_the_readme_table_is_the_rendering_of_the_stored_figures() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "perf_table.py"), "check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_each_row_is_printed_by_the_benchmark_it_names() -> None:
    for row in perf_table.ROWS:
        script = ROOT / perf_table.BENCHES[row.bench].script
        assert f'"{row.key}"' in script.read_text(encoding="utf-8"), (row.key, script)


def test_the_stored_figures_are_of_known_rows_and_versions() -> None:
    stored = json.loads(perf_table.RESULTS.read_text(encoding="utf-8"))
    keys = {row.key for row in perf_table.ROWS}
    assert set(stored) <= keys
    for figures in stored.values():
        assert set(figures) <= set(perf_table.ALL)
        for figure in figures.values():
            assert figure["build"] == "compiled"
            assert figure["cost_ratio"] > 0


def test_a_figure_renders_with_its_ratio_and_the_goal_it_meets() -> None:
    figure = {
        "build": "compiled",
        "measured": 0.5,
        "reference": 1.0,
        "cost_ratio": 0.5,
        "unit": "us",
        "reference_name": "upstream",
        "floor": "",
        "commit": "abc1234",
        "date": "2026-11-30",
    }
    row = perf_table.ROWS[0]
    table = perf_table.render({row.key: {"3.12": figure}})
    line = next(ln for ln in table.splitlines() if ln.startswith(f"| {row.path} |"))
    assert line == (
        f"| {row.path} | upstream | — | **0.50x** (0.5 vs 1 us) | — | ≤ {row.goal:g}x ✓ | — |"
    )
    assert "commits abc1234, measured 2026-11-30." in table
