"""The package's layers, read from its source: what differs between kinds lives in ``kinds.py`` alone,
and no module of the core imports from the layers built on top of it (the decorators)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import airflow_provider_disttrain
from airflow_provider_disttrain.kinds import JOB_KINDS

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


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(_source(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize(
    "path", [p for p in MODULES if "decorators" not in p.parts], ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_core_never_imports_the_decorators(path: Path) -> None:
    upward = {name for name in _imports(path) if name.startswith("airflow_provider_disttrain.decorators")}
    assert upward == set()
