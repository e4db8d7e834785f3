"""tools/gen_protos.py: deterministic output, and --check catches every kind of drift."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = Path("protos/src/perfetto_protos")


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A copy of the generator, the .proto sources and the committed generated code."""
    (tmp_path / "tools").mkdir()
    shutil.copy2(ROOT / "tools" / "gen_protos.py", tmp_path / "tools" / "gen_protos.py")
    shutil.copytree(ROOT / "protos" / "perfetto", tmp_path / "protos" / "perfetto")
    shutil.copytree(
        ROOT / GENERATED,
        tmp_path / GENERATED,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return tmp_path


def _gen(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "tools" / "gen_protos.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_committed_code_is_up_to_date(repo_copy: Path) -> None:
    result = _gen(repo_copy, "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout


def test_regeneration_reproduces_the_committed_bytes(repo_copy: Path) -> None:
    shutil.rmtree(repo_copy / GENERATED / "ipc")
    assert _gen(repo_copy).returncode == 0
    for path in sorted((ROOT / GENERATED / "ipc").glob("*_pb2.py*")):
        assert (repo_copy / GENERATED / "ipc" / path.name).read_bytes() == path.read_bytes()
    assert _gen(repo_copy, "--check").returncode == 0


def test_check_lists_changed_extra_and_missing_files(repo_copy: Path) -> None:
    out = repo_copy / GENERATED
    changed = out / "ipc" / "wire_protocol_pb2.py"
    changed.write_text(changed.read_text() + "# edited by hand\n")
    (out / "trace" / "stray_pb2.py").write_text("")
    (out / "common" / "trace_stats_pb2.pyi").unlink()

    result = _gen(repo_copy, "--check")

    assert result.returncode == 1
    assert "changed: ipc/wire_protocol_pb2.py" in result.stdout
    assert "extra: trace/stray_pb2.py" in result.stdout
    assert "missing: common/trace_stats_pb2.pyi" in result.stdout
    assert changed.read_text().endswith("# edited by hand\n")  # --check writes nothing


def test_check_notices_an_edited_proto(repo_copy: Path) -> None:
    source = repo_copy / "protos" / "perfetto" / "trace" / "trigger.proto"
    source.write_text(source.read_text().replace("stop_delay_ms = 4", "stop_delay_ms = 5"))

    result = _gen(repo_copy, "--check")

    assert result.returncode == 1
    assert "changed: trace/trigger_pb2.py" in result.stdout


def test_hand_written_files_are_left_alone(repo_copy: Path) -> None:
    init = repo_copy / GENERATED / "__init__.py"
    init.write_text(init.read_text() + "# ours\n")
    assert _gen(repo_copy).returncode == 0
    assert init.read_text().endswith("# ours\n")
    assert _gen(repo_copy, "--check").returncode == 0
