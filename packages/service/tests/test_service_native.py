"""The compiled and the pure build of the service read back the same bytes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from protozero import _native


def _run(env: dict[str, str], *args: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PERFETTO_PY_")}
    result = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("service_native_probe.py")), *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return result.stdout.splitlines()


def test_the_data_path_modules_have_a_compiled_form() -> None:
    modules = _native.compiled_modules("perfetto_service")
    assert "perfetto_service.core._packet_validator" in modules
    assert "perfetto_service.core._trace_buffer" in modules
    assert "perfetto_service.core._chunk_index" in modules
    assert "perfetto_service.core._read_slicer" in modules


def test_both_builds_read_back_the_same_bytes_from_random_chunk_streams() -> None:
    compiled = _run({}, "20261126", "60")
    pure = _run({_native.PURE_ENV: "1"}, "20261126", "60")
    assert sum(line.startswith("stats") for line in compiled) == 60
    assert any(line.startswith("trace 0a") for line in compiled)  # some packets were read
    assert compiled == pure


def test_both_builds_keep_the_same_chunks_through_a_ring_that_wraps_many_times() -> None:
    compiled = _run({}, "20261127", "6", "churn")
    pure = _run({_native.PURE_ENV: "1"}, "20261127", "6", "churn")
    stats = [line for line in compiled if line.startswith("stats")]
    assert len(stats) == 6
    assert any("'chunks_overwritten': 0," not in line for line in stats)  # the ring wrapped
    assert compiled == pure
