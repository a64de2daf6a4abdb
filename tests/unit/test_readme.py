"""The README cannot rot: it opens with the two commands, its Python snippets run as whole files, the
make targets it names exist, and it stays short. (Its shell commands run in tests/integration; the
pages under docs/ are tested in test_docs.py.)"""

from __future__ import annotations

import re
import subprocess

import pytest
from airflow.sdk import DAG

from tests.readme import README, REPO, code_blocks

README_SNIPPETS = code_blocks("python")


def test_the_readme_starts_with_the_demo_and_test_commands():
    head = README.read_text().split("## ", 2)[1]

    assert "`make demo`" in head and "`make test`" in head


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= 200


def test_the_readme_has_a_first_dag():
    assert any("PyTorchJobOperator(" in snippet for snippet in README_SNIPPETS)


@pytest.mark.parametrize("snippet", README_SNIPPETS, ids=lambda s: s.strip().splitlines()[0][:40])
def test_python_snippet_runs_as_a_whole_file(snippet):
    """Copied as it stands, with no hidden prelude: its imports are its own."""
    namespace: dict = {"__name__": "readme_snippet"}
    exec(compile(snippet, str(README), "exec"), namespace)

    dags = [value for value in namespace.values() if isinstance(value, DAG)]
    assert len(dags) == 1
    # Every task the snippet names was created.
    assert len(dags[0].task_ids) == snippet.count("task_id=")


@pytest.mark.parametrize("target", ["demo", "test"])
def test_every_make_target_the_readme_names_exists(target):
    assert f"make {target}" in README.read_text()
    dry_run = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, check=False)

    assert dry_run.returncode == 0, dry_run.stderr


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()

    assert "make test" in ci


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository():
    # mkdocs checks the links of docs/ (`mkdocs build --strict`); the README is outside its site.
    targets = re.findall(r"\]\(([^)#]+)[^)]*\)", README.read_text())
    relative = [target for target in targets if "://" not in target]

    assert relative, "the README links to its docs pages"
    assert [target for target in relative if not (REPO / target).exists()] == []
