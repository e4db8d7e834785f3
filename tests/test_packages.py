"""Every package installs with its metadata, typing marker and public surface, and the package
graph (tools/package_graph.py: the root pyproject's list, each package's dependencies) agrees
with what the packages' sources import and cimport."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from package_graph import Package, build_backend, packages  # noqa: E402

GRAPH = packages(ROOT)
BY_IMPORT = {p.import_name: p for p in GRAPH}
BY_DISTRIBUTION = {p.distribution: p for p in GRAPH}
_CIMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\w+)[\w.]*[ \t]+cimport|cimport[ \t]+(\w+))", re.M)
_PY_CIMPORT = re.compile(r"\bcython\.cimports\.(\w+)")


def _root_error(module: object) -> type[Exception]:
    """The one exception class of a package's `__all__` that all its others derive from."""
    errors = [
        obj
        for name in getattr(module, "__all__", [])
        if isinstance(obj := getattr(module, name), type) and issubclass(obj, Exception)
    ]
    roots = [e for e in errors if not any(b in errors for b in e.__mro__[1:])]
    assert len(roots) == 1, roots
    return roots[0]


@pytest.mark.parametrize("import_name", sorted(BY_IMPORT))
def test_package_is_installed_with_its_declared_version(import_name: str) -> None:
    package = BY_IMPORT[import_name]
    module = importlib.import_module(import_name)
    assert module.__version__ == version(package.distribution) == package.version


@pytest.mark.parametrize("import_name", sorted(BY_IMPORT))
def test_package_ships_py_typed_and_exports_what_all_names(import_name: str) -> None:
    assert (BY_IMPORT[import_name].directory / "src" / import_name / "py.typed").is_file()
    module = importlib.import_module(import_name)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    assert _root_error(module).__name__ in module.__all__


@pytest.mark.parametrize("import_name", sorted(BY_IMPORT))
def test_every_error_a_package_defines_derives_from_its_root_error(import_name: str) -> None:
    module = importlib.import_module(import_name)
    root = _root_error(module)
    errors = [
        obj
        for name in module.__all__
        if isinstance(obj := getattr(module, name), type) and issubclass(obj, Exception)
    ]
    assert all(issubclass(error, root) for error in errors)


def test_the_root_lists_every_package_of_the_tree() -> None:
    on_disk = {
        p.parent
        for p in [ROOT / "protos" / "pyproject.toml", *ROOT.glob("packages/*/pyproject.toml")]
    }
    assert {p.directory for p in GRAPH} == on_disk


def _compiled_dependencies(package: Package) -> set[str]:
    """The siblings (distributions) whose `.pxd` files `package`'s compiled sources cimport
    (perfetto_client cimports the C interface of perfetto_smb's capsules)."""
    source = package.directory / "src"
    names: set[str] = set()
    for path in [*source.rglob("*.pxd"), *source.rglob("*.pyx")]:
        names.update(a or b for a, b in _CIMPORT.findall(path.read_text()))
    for path in source.rglob("*.py"):
        if path.with_suffix(".pxd").is_file():
            names.update(_PY_CIMPORT.findall(path.read_text()))
    return {BY_IMPORT[n].distribution for n in names if n in BY_IMPORT and n != package.import_name}


@pytest.mark.parametrize("name", [p.name for p in GRAPH])
def test_a_package_pins_exactly_the_siblings_its_compiled_modules_are_bound_to(
    name: str,
) -> None:
    package = next(p for p in GRAPH if p.name == name)
    bound = _compiled_dependencies(package)
    for sibling, requirement in package.dependencies.items():
        wanted = f"{sibling}=={BY_DISTRIBUTION[sibling].version}"
        if sibling in bound:
            assert requirement == wanted, f"{package.distribution}: {requirement}"
        else:  # a loose range that admits the sibling's version
            assert re.fullmatch(rf"{sibling}>=0\.1,<0\.2", requirement), requirement
    assert bound <= set(package.dependencies), f"{package.distribution} does not declare them"
    assert set(package.build_requires) == bound
    assert all(package.build_requires[s] == package.dependencies[s] for s in bound)


@pytest.mark.parametrize("name", [p.name for p in GRAPH])
def test_a_package_declares_the_siblings_it_imports_and_nothing_more(name: str) -> None:
    package = next(p for p in GRAPH if p.name == name)
    spec = importlib.util.spec_from_file_location("check_layers", ROOT / "tools/check_layers.py")
    assert spec is not None
    assert spec.loader is not None
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    source = package.directory / "src" / package.import_name
    imported = {
        top
        for path in source.rglob("*")
        if path.suffix in {".py", ".pyx", ".pxd"}
        for top, _ in layers.imported_packages(path)
    }
    declared = {BY_DISTRIBUTION[d].import_name for d in package.dependencies}
    assert declared <= imported, f"{package.distribution} declares what it never imports"


def test_the_compiled_packages_name_the_build_backend() -> None:
    backend = build_backend(ROOT)
    assert backend is not None
    project = tomllib.loads((backend / "pyproject.toml").read_text())["project"]
    pinned = f'"perfetto-build=={project["version"]}"'
    compiled = [
        p
        for p in GRAPH
        if any(
            any((p.directory / "src").rglob(pattern)) for pattern in ("*.pxd", "*.pyx", "lib*.c")
        )
    ]
    assert [p.name for p in compiled] == [
        "protozero",
        "protos",
        "smb",
        "probes",
        "service",
        "client",
        "heapprofd",
    ]
    for package in compiled:
        text = (package.directory / "pyproject.toml").read_text()
        assert 'build-backend = "perfetto_build"' in text
        assert pinned in text
    assert not list(ROOT.glob("packages/*/build.py")) + list(ROOT.glob("protos/build.py"))


def _declared_edges() -> set[tuple[str, str]]:
    """(package, sibling) by their short names (`service`, `smb`), as the pyproject files say."""
    short = {p.distribution: p.distribution.removeprefix("perfetto-") for p in GRAPH}
    return {(short[p.distribution], short[d]) for p in GRAPH for d in p.dependencies}


def test_the_readme_layer_table_is_the_declared_graph() -> None:
    readme = (ROOT / "README.md").read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    short = {p.distribution.removeprefix("perfetto-") for p in GRAPH}
    edges = set()
    for row in re.findall(r"^\| `[^`]+/` \| (perfetto-[\w-]+) \|.*\| ([^|]*) \|$", readme, re.M):
        name = row[0].removeprefix("perfetto-")
        for word in re.findall(r"[\w-]+", row[1].split("(")[0]):
            if word in short:
                edges.add((name, word))
    assert edges == _declared_edges()


def test_the_architecture_drawing_is_the_declared_graph() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    drawing = page.split("```mermaid", 1)[1].split("```", 1)[0]
    short = {p.distribution.removeprefix("perfetto-") for p in GRAPH}
    edges = {
        (a, b)
        for a, b in re.findall(r"^\s*(\w+)(?:\[[^\]]*\])?\s*-->\s*(\w+)", drawing, re.M)
        if a in short and b in short
    }
    assert edges == _declared_edges()
