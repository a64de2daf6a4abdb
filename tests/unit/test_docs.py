"""The pages under docs/ cannot rot: the Role they document is the one the integration tests bind, their
Python snippets build valid tasks, every page is in the site's navigation, and the make targets the
development pages name exist. (`make lint` builds the site with `mkdocs build --strict`.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.readme import DOCS, REPO, block_under, code_blocks, doc_pages

CONNECTION = DOCS / "guides" / "connection.md"
# The snippets of the guides are the body of a `with DAG(...)` block (the guides say so; the README's
# first DAG shows the whole file): these are the imports such a file has.
SNIPPET_PRELUDE = """
from datetime import timedelta
from airflow.sdk import DAG
from airflow_provider_disttrain import *  # noqa: F403
from airflow_provider_disttrain.operators.manage import *  # noqa: F403
"""
SNIPPETS = [(page, snippet) for page in doc_pages() for snippet in code_blocks("python", page)]


def _snippet_id(case: tuple[Path, str]) -> str:
    page, snippet = case
    return f"{page.relative_to(DOCS)}:{snippet.strip().splitlines()[0][:40]}"


def test_the_documented_role_is_the_file_the_integration_tests_bind():
    documented = yaml.safe_load(block_under("RBAC: the Role the provider needs", "yaml", CONNECTION))
    bound = yaml.safe_load((REPO / "deploy" / "rbac" / "role.yaml").read_text())

    assert documented == bound
    assert documented["kind"] == "Role"


def test_the_documented_cluster_role_is_the_file_the_integration_tests_bind():
    documented = [
        yaml.safe_load(block)
        for block in code_blocks("yaml", CONNECTION)
        if "kind: ClusterRole\n" in block and "clustertrainingruntimes" in block
    ]
    bound = yaml.safe_load((REPO / "deploy" / "rbac" / "clusterrole.yaml").read_text())

    assert documented == [bound]
    assert bound["rules"] == [  # reads only
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["clustertrainingruntimes"], "verbs": ["get"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get"]},
    ]


def test_the_guides_have_python_snippets():
    # The snippets moved out of the README are still here, and still run below.
    assert len(SNIPPETS) >= 10


@pytest.mark.parametrize("case", SNIPPETS, ids=_snippet_id)
def test_python_snippet_builds_valid_tasks(case):
    _, snippet = case
    namespace: dict = {}
    exec(SNIPPET_PRELUDE, namespace)
    with namespace["DAG"]("docs_snippet", schedule=None) as dag:
        exec(snippet, namespace)

    # Every task the snippet names was created (an import-only snippet names none, and must import).
    assert len(dag.task_ids) == snippet.count("task_id=")


def test_every_page_is_in_the_sites_navigation():
    nav = (REPO / "mkdocs.yml").read_text()

    assert [page for page in doc_pages() if f": {page.relative_to(DOCS)}\n" not in nav] == []


@pytest.mark.parametrize(
    ("page", "target"),
    [
        ("development/index.md", "help"),
        ("development/index.md", "unit-test"),
        ("development/index.md", "bench"),
        ("development/index.md", "cluster-status"),
        ("development/local-cluster.md", "cluster-up"),
        ("development/local-cluster.md", "cluster-down"),
    ],
)
def test_every_make_target_the_development_pages_name_exists(page, target):
    assert f"make {target}" in (DOCS / page).read_text()
    dry_run = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, check=False)

    assert dry_run.returncode == 0, dry_run.stderr
