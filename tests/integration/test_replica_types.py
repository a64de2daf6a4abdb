"""Replica types as the real training-operator reads them: TFJob's Master, and names in lower case."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import unique_dag_id

DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator

@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    TrainingJobOperator(task_id="train", kind={kind!r}, job_manifest={manifest!r},
                        wait_policy=WaitPolicy(poll_interval=1, startup_timeout=120))

pipeline()
"""


def manifest(api_version: str, kind: str, key: str, container: str, replicas: dict[str, int]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "replica-types"},
        "spec": {
            key: {
                replica: {
                    "replicas": count,
                    "restartPolicy": "Never",
                    "template": {"spec": {"containers": [{"name": container, "image": "busybox:1.36"}]}},
                }
                for replica, count in replicas.items()
            }
        },
    }


@pytest.mark.parametrize(
    ("kind", "plural", "job", "stored"),
    [
        (
            "TFJob",
            "tfjobs",
            manifest("kubeflow.org/v1", "TFJob", "tfReplicaSpecs", "tensorflow", {"Master": 1, "Worker": 2}),
            ["Master", "Worker"],
        ),
        (
            "PyTorchJob",
            "pytorchjobs",
            manifest("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs", "pytorch", {"master": 1, "worker": 1}),
            ["Master", "Worker"],
        ),
    ],
    ids=["tfjob-master", "pytorchjob-lower-case"],
)
def test_the_job_is_accepted_runs_and_is_stored_with_the_operators_names(
    namespace, run_dag, jobs, kind, plural, job, stored
):
    dag_id = unique_dag_id("replicas")

    result = run_dag(dag_id, DAG.format(dag_id=dag_id, kind=kind, manifest=job))

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert summary["state"] == "succeeded"
    live = jobs.get(plural, namespace, summary["name"])
    key = next(iter(job["spec"]))
    assert sorted(live["spec"][key]) == stored
