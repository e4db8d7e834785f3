"""Runs a program as `python script.py` / `python -m module` would, in this interpreter."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import Any

from perfetto_client._errors import TracingError
from perfetto_client._tracer import _engine

_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


class Program:
    """A script or module ready to run: its code, `__main__` module and `sys.argv`."""

    def __init__(self, target: str, args: list[str], module: bool) -> None:
        self.main = types.ModuleType("__main__")
        namespace = self.main.__dict__
        namespace["__builtins__"] = __builtins__
        if module:
            self.code, path, spec = _module_code(target)
            namespace.update(__file__=path, __spec__=spec, __package__=spec.parent)
            namespace["__loader__"] = spec.loader
            self.argv = [path, *args]
            self.path0 = os.getcwd()
        else:
            try:
                with open(target, "rb") as f:
                    source = f.read()
            except OSError as exc:
                raise TracingError(f"can't open file {target!r}: {exc.strerror}") from None
            # As python names the script: joined to the current directory, not normalized.
            path = os.path.join(os.getcwd(), target)
            self.code = compile(source, path, "exec")
            namespace.update(__file__=path, __spec__=None, __package__=None)
            self.argv = [target, *args]
            self.path0 = os.path.dirname(os.path.abspath(target))

    def prepare(self) -> None:
        """Makes this process look like the program's own: `sys.argv`, `sys.path[0]`, `__main__`."""
        sys.argv[:] = self.argv
        if sys.path and os.path.abspath(sys.path[0] or ".") != self.path0:
            sys.path[0] = self.path0
        sys.modules["__main__"] = self.main

    def run(self) -> None:
        """Executes the program (exceptions propagate as they would from the interpreter)."""
        exec(self.code, self.main.__dict__)


_engine.TRANSPARENT.add(Program.run.__code__)


def _module_code(name: str) -> tuple[types.CodeType, str, Any]:
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{name}.__main__")
    except (ImportError, ValueError) as exc:
        raise TracingError(f"no module named {name!r} ({exc})") from None
    finally:
        del sys.path[0]
    if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
        raise TracingError(f"no module named {name!r}")
    code = spec.loader.get_code(spec.name)
    if code is None:
        raise TracingError(f"no code object available for {name!r}")
    return code, spec.origin or name, spec


def without_own_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback minus this package's frames at its head (what python itself would show)."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN_DIR):
        tb = tb.tb_next
    return tb
