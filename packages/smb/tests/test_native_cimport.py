"""perfetto_smb's compiled modules cimport protozero's: both load compiled, or both pure."""

from __future__ import annotations

from protozero import _native
from smb_testlib import run_probe

# protozero as installed without a C compiler: its `.py` modules load, its `.so` files do not.
_PROBE = """
import importlib.util, sys
from pathlib import Path

class PureProtozero:
    def find_spec(self, name, path, target=None):
        parent, _, leaf = name.rpartition(".")
        for entry in (path or []) if parent == "protozero" else []:
            if (Path(entry) / f"{leaf}.py").is_file():
                return importlib.util.spec_from_file_location(name, Path(entry) / f"{leaf}.py")
        return None

sys.meta_path.insert(0, PureProtozero())
import perfetto_smb
from protozero import _native
print(sorted(_native.compiled_modules("protozero").items()))
print(sorted(_native.compiled_modules("perfetto_smb").items()))
"""


def test_smb_cimports_protozero() -> None:
    assert _native.cimported_packages("perfetto_smb") == ["protozero"]


def test_smb_loads_pure_when_protozero_runs_pure() -> None:
    result = run_probe(_PROBE, {}, timeout=60)
    protozero_state, smb_state = (dict(eval(line)) for line in result.stdout.splitlines())
    assert protozero_state
    assert not any(protozero_state.values())
    assert "perfetto_smb._trace_writer" in smb_state
    assert not any(smb_state.values())
    # Nobody asked for pure (PERFETTO_PY_PURE=1): it says so, once, with the reason.
    [line] = [line for line in result.stderr.splitlines() if line.startswith("perfetto_smb:")]
    assert "cimports protozero, which runs pure" in line


def test_smb_says_once_why_it_runs_pure() -> None:
    stderr = run_probe(_PROBE, {_native.NOTICE_ENV: "1"}, timeout=60).stderr
    lines = [line for line in stderr.splitlines() if line.startswith("perfetto_smb:")]
    assert len(lines) == 1
    assert "cimports protozero, which runs pure" in lines[0]
    assert "perfetto_smb._trace_writer" in lines[0]
