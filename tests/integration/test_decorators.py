"""``@task.pytorch_job`` and ``@task.mpi_job`` end to end on the local cluster, with ``dag.test()``.

kwok's pods run no code, so ``tests/integration/pod_runner.py`` stands in for the kubelet of pods
annotated ``disttrain.test/execute``: it runs their container command on this machine (the venv's
python for the image's; the torchrun/mpirun stand-ins where those are not installed) with the
environment the training-operator and mpi-operator wrote into the pod, and reports the exit code and
termination message, which the kwok stage turns into the container's terminated state. Everything
else is real: the API server, the Kubeflow operators, Airflow's runtime and XComs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import DagRunResult, unique_dag_id
from tests.integration.pod_runner import EXECUTE, PodRunner

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "example_dags" / "taskflow_decorators.py"


@pytest.fixture
def pod_runner(admin_api: Any, namespace: str, tmp_path: Path) -> Iterator[PodRunner]:
    from kubernetes import client

    with PodRunner(client.CoreV1Api(admin_api), namespace, tmp_path) as runner:
        yield runner


def test_the_example_dag_runs_each_function_in_its_job_and_hands_rank_0s_value_on(
    airflow_db: Path, namespace: str, pod_runner: PodRunner, jobs: Any
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    from airflow_provider_disttrain.decorators.base import DecoratedTrainingJobOperator

    folder = airflow_db / "decorator_examples"
    folder.mkdir(exist_ok=True)
    shutil.copy(EXAMPLE, folder)
    bag = DagBag(str(folder))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("disttrain_taskflow_decorators")
    decorated = [t for t in dag.tasks if isinstance(t, DecoratedTrainingJobOperator)]
    assert sorted(t.task_id for t in decorated) == ["evaluate", "train"]
    for operator in decorated:  # the example's jobs, run by the pod runner (not in the example: test-only)
        operator.annotations = {EXECUTE: "true"}

    result = DagRunResult(dag.test())

    assert result.state == "success", result.task_states
    # 1 Master + 1 Worker, nproc_per_node=2: torchrun started 4 processes; global rank 0 answered.
    assert result.xcom("train") == {
        "model_uri": "s3://example-bucket/datasets/v3/model-lr0.01",
        "world_size": 4,
        "rank": 0,
        "epochs": 2,
    }
    # 2 workers x 1 slot: mpirun (from the launcher) ran 2 ranks; the train task's XCom reached them.
    assert result.xcom("evaluate") == {
        "model_uri": "s3://example-bucket/datasets/v3/model-lr0.01",
        "accuracy": 0.9,
        "ranks": 2,
    }
    assert result.xcom("report").endswith("trained on 4 processes, accuracy 0.9 on 2 MPI ranks")
    ran = set(pod_runner.results)
    assert any(name.endswith("master-0") for name in ran) and any(name.endswith("worker-0") for name in ran)
    assert any("-launcher-" in name for name in ran), ran  # the MPIJob launcher; its workers stay simulated
    assert all(code == 0 for code, _, _ in pod_runner.results.values()), pod_runner.results
    # The value reached the task through the leader's container status, as Kubernetes reports it.
    [pytorch_job] = jobs.list("pytorchjobs", namespace)
    [master] = [
        p for p in jobs.pods(namespace, pytorch_job["metadata"]["name"]) if p.metadata.name.endswith("master-0")
    ]
    assert json.loads(master.status.container_statuses[0].state.terminated.message)["world_size"] == 4


FAILING_DAG = """
import pendulum
from airflow.sdk import dag, task
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    @task
    def shards():
        return 3

    @task.pytorch_job(
        image="trainer:1", num_workers=1, restart_policy="Never", deferrable=True,
        wait_policy=WaitPolicy(poll_interval=1),
        job_name={job_name!r}, annotations={{"disttrain.test/execute": "true"}},
    )
    def train(count):
        return {{"shards": set(range(count))}}  # a set is not JSON

    train(shards())


pipeline()
"""


def test_a_value_that_cannot_become_an_xcom_fails_the_task_with_the_reason(
    namespace: str, run_dag: Any, pod_runner: PodRunner, capfd: pytest.CaptureFixture[str]
) -> None:
    dag_id = unique_dag_id("deco_fail")
    job_name = f"deco-{dag_id[-6:]}"
    result = run_dag(dag_id, FAILING_DAG.format(dag_id=dag_id, job_name=job_name))

    assert result.task_state("shards") == "success"
    assert result.task_state("train") == "failed"
    output = "".join(capfd.readouterr())
    assert "JobFailedError" in output
    # Written by rank 0 to the termination message, shown by the operator's failure explanation.
    assert (
        f"master-0 ({job_name}-master-0): Failed - container pytorch: Error, exit code 1; train failed on rank 0: "
        "ResultError: the value rank 0 returned (dict) cannot become the task's XCom" in output
    )
