"""The package's layers, read from its source: what differs between kinds lives in ``kinds.py`` alone,
each folder imports only from the layers below it (``LAYERS``), no two modules import each other
(through any number of others), and no module imports the package root."""

from __future__ import annotations

import ast
import graphlib
import itertools
import re
from pathlib import Path

import pytest

import airflow_provider_disttrain
from airflow_provider_disttrain.job.kinds import JOB_KINDS

PACKAGE = Path(airflow_provider_disttrain.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))
KIND_NAMES = "|".join(sorted(JOB_KINDS))
# A kind's name compared with something: ``kind == "MPIJob"``, ``"TrainJob" != kind``, ``in ("PyTorchJob", ...)``.
KIND_BRANCH = re.compile(rf"""(==|!=|\bin\b)\s*\(?\s*["']({KIND_NAMES})["']|["']({KIND_NAMES})["']\s*(==|!=)""")
# The per-kind literals that used to stand outside the table.
KIND_LITERALS = re.compile(r"""-launcher["']|MPIJobSuspended|["']slotsPerWorker["']\]|replica_specs_key is None""")


def _source(path: Path) -> str:
    return path.read_text()


@pytest.mark.parametrize(
    "path", [p for p in MODULES if p.name != "kinds.py"], ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_module_but_the_kinds_table_branches_on_a_kinds_name(path: Path) -> None:
    source = _source(path)
    assert KIND_BRANCH.findall(source) == []
    assert KIND_LITERALS.findall(source) == []


def test_the_pattern_finds_the_branches_it_is_meant_to() -> None:
    assert KIND_BRANCH.search('if kind == "MPIJob":')
    assert KIND_BRANCH.search("if job['kind'] in ('TrainJob', 'TFJob'):")
    assert KIND_LITERALS.search('names = {ref.name, f"{ref.name}-launcher"}')
    assert not KIND_BRANCH.search('get_job_kind("MPIJob")')


PACKAGE_NAME = airflow_provider_disttrain.__name__


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULE_NAMES = {_module_name(path): path for path in MODULES}


def _imports(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """The modules that ``module``'s source imports anywhere: at the top, under ``TYPE_CHECKING``, inside
    a function. A relative import is resolved against ``module``; ``from a.b import c`` names the module
    ``a.b.c`` when the package has one, else ``a.b`` itself (``c`` is a name defined there)."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            for alias in node.names:
                submodule = f"{origin}.{alias.name}"
                names.add(submodule if submodule in MODULE_NAMES else origin)
    return names


def _package_imports(module: str) -> set[str]:
    """The package's own modules that ``module`` imports."""
    path = MODULE_NAMES[module]
    imported = _imports(_source(path), module, is_package=path.name == "__init__.py")
    return {name for name in imported if name in MODULE_NAMES and name != module}


IMPORTS = {module: _package_imports(module) for module in MODULE_NAMES}


def _circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import circles, each as the modules in import order, the first repeated at the end.

    graphlib reports one circle at a time; one import of it is set aside to look for the next, so that
    a failure lists each tangle (and more than one circle of a tangle when they share no import).
    """
    # graphlib takes each node's predecessors: an imported module comes before its importer.
    graph = {module: set(imported) for module, imported in imports.items()}
    circles: list[list[str]] = []
    while True:
        try:
            graphlib.TopologicalSorter(graph).prepare()
        except graphlib.CycleError as error:
            # Each node of graphlib's circle is imported by the next one: reversed, it reads in import order.
            found: list[str] = error.args[1]
            circles.append(found[::-1])
            graph[found[1]].discard(found[0])
        else:
            return circles


def test_the_import_reader_finds_every_kind_of_import() -> None:
    source = """
from __future__ import annotations
import airflow_provider_disttrain.job.kinds
from airflow_provider_disttrain.utils import telemetry
from airflow_provider_disttrain import __version__
from . import api_errors
from ..job.status import job_state
if TYPE_CHECKING:
    from airflow_provider_disttrain.kube.connection import ClusterConnection
def later():
    from .faults import classify
"""
    assert _imports(source, f"{PACKAGE_NAME}.hooks.example") == {
        "__future__",
        f"{PACKAGE_NAME}.job.kinds",
        f"{PACKAGE_NAME}.utils.telemetry",
        PACKAGE_NAME,
        f"{PACKAGE_NAME}.hooks.api_errors",
        f"{PACKAGE_NAME}.job.status",
        f"{PACKAGE_NAME}.kube.connection",
        f"{PACKAGE_NAME}.hooks.faults",
    }
    assert _imports("from .manage import X", f"{PACKAGE_NAME}.operators", is_package=True) == {
        f"{PACKAGE_NAME}.operators.manage"
    }


def test_the_circle_finder_lists_each_circle_in_import_order() -> None:
    imports = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"e"}, "e": {"f"}, "f": {"d"}}
    circles = sorted(_circles(imports))
    assert [sorted(circle[:-1]) for circle in circles] == [["a", "b"], ["d", "e", "f"]]
    for circle in circles:
        assert circle[0] == circle[-1]
        assert all(after in imports[before] for before, after in itertools.pairwise(circle))
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_modules_import_each_other() -> None:
    """Through any number of modules, and counting the imports made inside functions and for type
    checking: a circle means two modules that cannot be read, tested or moved one without the other."""
    if circles := _circles(IMPORTS):
        pytest.fail(
            "import circles (each module imports the next):\n"
            + "\n".join(" -> ".join(name.removeprefix(f"{PACKAGE_NAME}.") for name in circle) for circle in circles)
        )


def test_no_module_imports_the_package_root() -> None:
    """The root re-exports the operators, so a module that takes a name from it pulls them all in and sits
    above them; a value every layer needs lives in a module of its own (``version.py``)."""
    importers = sorted(module for module, imported in IMPORTS.items() if PACKAGE_NAME in imported)
    assert importers == [], f"these modules import the package root {PACKAGE_NAME}: {importers}"


@pytest.mark.parametrize(
    "path", [p for p in MODULES if "decorators" not in p.parts], ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_core_never_imports_the_decorators(path: Path) -> None:
    upward = {name for name in IMPORTS[_module_name(path)] if name.startswith(f"{PACKAGE_NAME}.decorators")}
    assert upward == set()


# The package's folders and root modules, bottom up: a module imports from its own folder and from the
# layers below, never from a layer above nor from another folder of its own layer. docs/architecture.md
# draws the same order. "" is the package root (``__init__.py``).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("exceptions", "version", "utils"),
    ("kube",),
    ("kueue",),
    ("job",),
    ("parameters", "ownership", "failures", "lineage"),
    ("hooks", "manifest"),
    ("pods",),
    ("triggers",),
    ("operators",),
    ("sensors", "decorators", "ui"),
    ("get_provider_info", ""),
)
LAYER_OF = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def _part(module: str) -> str:
    """The folder or root module that ``module`` is part of ("" for the package itself)."""
    return module.removeprefix(PACKAGE_NAME).removeprefix(".").partition(".")[0]


def _upward(imports: dict[str, set[str]], layer_of: dict[str, int]) -> list[str]:
    """The imports that do not run down a layer, as ``importer -> imported``: to a higher layer, or to
    another folder of the same layer."""
    return sorted(
        f"{module} -> {imported}"
        for module, imported_modules in imports.items()
        for imported in imported_modules
        if _part(module) != _part(imported) and layer_of[_part(imported)] >= layer_of[_part(module)]
    )


def test_every_folder_and_root_module_has_a_layer() -> None:
    """A new folder (or a module at the root) is placed in ``LAYERS``, so that its imports are held to it."""
    assert sorted({_part(module) for module in MODULE_NAMES} - set(LAYER_OF)) == []


def test_the_layer_check_finds_an_import_that_runs_up_or_sideways() -> None:
    layer_of = {"low": 0, "mid": 1, "beside": 1, "high": 2}
    names = {part: f"{PACKAGE_NAME}.{part}.m" for part in layer_of}
    downward = {names["high"]: {names["mid"], names["low"]}, names["mid"]: {names["low"], f"{PACKAGE_NAME}.mid.n"}}
    assert _upward(downward, layer_of) == []
    upward = {names["low"]: {names["high"]}, names["mid"]: {names["beside"]}}
    assert _upward(upward, layer_of) == [
        f"{names['low']} -> {names['high']}",
        f"{names['mid']} -> {names['beside']}",
    ]


def test_no_import_runs_up_a_layer() -> None:
    """Counting the imports made inside functions and for type checking: a lower layer that needs a
    higher one's type names what it needs itself (``ownership.identity.JobStore``)."""
    if upward := _upward(IMPORTS, LAYER_OF):
        pytest.fail(
            "imports that run up a layer or sideways (LAYERS):\n"
            + "\n".join(line.replace(f"{PACKAGE_NAME}.", "") for line in upward)
        )
