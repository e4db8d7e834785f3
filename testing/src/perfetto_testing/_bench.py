"""A benchmark's figure for the README's performance table, as one line on stdout; the
instructions a benchmark's loop runs, counted by callgrind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

ROW_PREFIX = "perf-row "
"""What starts each line `report_row` prints; `tools/perf_table.py` reads these lines."""


def report_row(
    key: str,
    *,
    measured: float,
    reference: float,
    cost_ratio: float,
    unit: str,
    reference_name: str,
    floor: str = "",
) -> None:
    """Prints one figure of table row `key`, measured by this interpreter and build.

    `measured` and `reference` are in `unit` (the reference named by `reference_name`, measured
    in the same run); `cost_ratio` is what ours costs over what the reference costs (below 1:
    ours is cheaper), the quantity each row's goal bounds; `floor` says what the least cost
    measured in the same run was."""
    build = "pure" if os.environ.get("PERFETTO_PY_PURE") == "1" else "compiled"
    row = {
        "key": key,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "build": build,
        "measured": measured,
        "reference": reference,
        "cost_ratio": cost_ratio,
        "unit": unit,
        "reference_name": reference_name,
        "floor": floor,
    }
    print(ROW_PREFIX + json.dumps(row), flush=True)


def loop_instructions(argv: list[str], profile: str = "/dev/null") -> int:
    """The instructions the command `argv` runs inside `itertools.starmap` (where a
    benchmark's child process runs its loop), counted by callgrind (valgrind installed); its
    profile goes to `profile`."""
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--toggle-collect=starmap_next",
            f"--callgrind-out-file={profile}",
            *argv,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"Collected : (\d+)", proc.stderr)
    if match is None:
        raise SystemExit(f"no instruction count from callgrind:\n{proc.stderr}")
    return int(match.group(1))
