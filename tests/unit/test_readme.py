"""The README cannot rot: its Role is the one the integration tests bind, its Python snippets build
valid tasks, and the make targets it names exist. (Its shell commands run in tests/integration.)"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.readme import README, block_under, code_blocks

REPO = README.parent
SNIPPET_PRELUDE = """
from datetime import timedelta
from airflow.sdk import DAG
from airflow_provider_disttrain import *  # noqa: F403
from airflow_provider_disttrain.operators.manage import *  # noqa: F403
"""


def test_the_documented_role_is_the_file_the_integration_tests_bind():
    documented = yaml.safe_load(block_under("RBAC: the Role the provider needs", "yaml"))
    bound = yaml.safe_load((REPO / "deploy" / "rbac" / "role.yaml").read_text())

    assert documented == bound
    assert documented["kind"] == "Role"


@pytest.mark.parametrize("snippet", code_blocks("python"), ids=lambda s: s.strip().splitlines()[0][:40])
def test_python_snippet_builds_valid_tasks(snippet):
    namespace: dict = {}
    exec(SNIPPET_PRELUDE, namespace)
    with namespace["DAG"]("readme_snippet", schedule=None) as dag:
        exec(snippet, namespace)

    # Every task the snippet names was created (an import-only snippet names none, and must import).
    assert len(dag.task_ids) == snippet.count("task_id=")


def test_the_readme_starts_with_the_demo_and_test_commands():
    head = README.read_text().split("## ", 2)[1]

    assert "`make demo`" in head and "`make test`" in head


@pytest.mark.parametrize(
    "target", ["demo", "test", "help", "unit-test", "bench", "cluster-up", "cluster-down", "cluster-status"]
)
def test_every_make_target_the_readme_names_exists(target):
    assert f"make {target}" in README.read_text()
    dry_run = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True, check=False)

    assert dry_run.returncode == 0, dry_run.stderr


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()

    assert "make test" in ci


def test_the_documented_cluster_role_is_the_file_the_integration_tests_bind():
    documented = [
        yaml.safe_load(block)
        for block in code_blocks("yaml")
        if "kind: ClusterRole\n" in block and "clustertrainingruntimes" in block
    ]
    bound = yaml.safe_load((REPO / "deploy" / "rbac" / "clusterrole.yaml").read_text())

    assert documented == [bound]
    assert bound["rules"] == [  # reads only
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["clustertrainingruntimes"], "verbs": ["get"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": ["get"]},
    ]
