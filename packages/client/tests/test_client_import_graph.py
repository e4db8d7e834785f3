"""The client's module graph: no import cycle, and the SDK never imports the tracer.

The graph holds each module's imports of the package's own modules, outside `if
TYPE_CHECKING:`: in `.py` sources (an import inside a function counts: it ties the two modules
as much, it only hides a cycle from the interpreter), the (c)imports of `.pyx` sources, and
the cimports of a compiled module's `.pxd` (it loads the modules it cimports). An SDK module
may load the tracer lazily, in a function (`perfetto_client.record`), never when it is
imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src"
PACKAGE = "perfetto_client"
TRACER = f"{PACKAGE}._tracer"

# tools/install_check.py runs these tests against an installed wheel, beside no sources
pytestmark = pytest.mark.skipif(
    not (SRC / PACKAGE).is_dir(), reason="reads the package's source tree, absent here"
)

_PYX_IMPORT = re.compile(r"^(?:from\s+([\w.]+)\s+c?import\s+([\w, ()]+)|c?import\s+([\w.]+))", re.M)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, list[Path]]:
    """Each module of the package and the files that make it (`.py`/`.pyx`, its `.pxd`)."""
    out: dict[str, list[Path]] = {}
    for path in sorted((SRC / PACKAGE).rglob("*")):
        if path.suffix in {".py", ".pyx"}:
            out.setdefault(_module_name(path), []).append(path)
    for path in sorted((SRC / PACKAGE).rglob("*.pxd")):
        name = _module_name(path)
        if name in out:
            out[name].append(path)
    return out


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of a module, outside `if TYPE_CHECKING:` blocks."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for statement in node.orelse:
                visit(statement)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child)

    visit(tree)
    return found


def _module_level(tree: ast.Module) -> set[int]:
    """The ids of the import statements a module runs when it is imported (not in functions)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            inside.update(id(n) for n in ast.walk(node) if n is not node)
    return {id(n) for n in _imports(tree) if id(n) not in inside}


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _targets(module: str, names: list[str], modules: dict[str, list[Path]]) -> list[str]:
    """The package's modules that `from module import names` (or `import module`) loads."""
    module = module.removeprefix("cython.cimports.")
    out = [f"{module}.{name}" for name in names if f"{module}.{name}" in modules]
    if module in modules and len(out) < len(names):
        out.append(module)
    return out


def import_graph(*, module_level_only: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (with `module_level_only`, those it
    imports when it is imported, not in its functions)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, paths in modules.items():
        edges = graph[name]
        for path in paths:
            text = path.read_text()
            if path.suffix == ".py":
                tree = ast.parse(text)
                level = _module_level(tree)
                for node in _imports(tree):
                    if module_level_only and id(node) not in level:
                        continue
                    if isinstance(node, ast.ImportFrom):
                        if node.module and node.level == 0:
                            imported = [a.name for a in node.names]
                            edges.update(_targets(node.module, imported, modules))
                    else:
                        for alias in node.names:
                            edges.update(_targets(alias.name, [], modules))
            else:  # .pyx/.pxd: (c)imports at the start of a line, read as text
                for match in _PYX_IMPORT.finditer(text):
                    if match[1]:
                        imported = [n.strip() for n in match[2].strip("()").split(",")]
                        edges.update(_targets(match[1], [n for n in imported if n], modules))
                    else:
                        edges.update(_targets(match[3], [], modules))
        edges.discard(name)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` (its modules in order, the first repeated), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle is not None:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle is not None:
                return cycle
    return None


def test_the_graph_sees_the_modules_and_their_imports() -> None:
    graph = import_graph()
    assert f"{PACKAGE}._track_event_writer" in graph[f"{PACKAGE}._track_event"]
    assert f"{PACKAGE}._tracks" in graph[f"{PACKAGE}._track_event"]  # from its .pxd too
    assert f"{TRACER}._hook" in graph  # a .pyx
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_client_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, " -> ".join(cycle)


def test_the_sdk_does_not_import_the_tracer() -> None:
    graph = import_graph(module_level_only=True)
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if not (module + ".").startswith(TRACER + ".")
        for target in targets
        if (target + ".").startswith(TRACER + ".")
    )
    assert upward == []
