"""``@task.pytorch_job`` and ``@task.mpi_job`` for real, with ``dag.test()``, on the executing node
(dev/cluster/README.md): the PyTorchJob's replicas run the decorator's entrypoint under the real
``torchrun`` (Master + 1 Worker, 2 processes each, one gloo process group), and the MPIJob's launcher
runs Open MPI's ``mpirun`` over the hostfile and SSH keys the mpi-operator generated, into two workers
running ``sshd``. The values come back through the leader pods' termination messages, as Kubernetes
reports them.

The test's, not the example's: the namespace is steered to the executing node, and the pods'
``PYTHONPATH`` is this checkout, standing in for the image's ``pip install --no-deps
airflow-provider-disttrain`` (the executing node has no images; its python is the venv of
training/requirements.txt).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import DagRunResult, unique_dag_id

# Trains for real on the executing node (CPU-bound): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("executing")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "example_dags" / "taskflow_decorators.py"
# The image's provider installation, on a node without images (see the module docstring).
PROVIDER_ON_PATH = {"PYTHONPATH": str(REPO)}


def test_the_example_dag_all_reduces_across_torchrun_and_mpirun_ranks_and_hands_rank_0s_value_on(
    example_dags: Path, executing: str, jobs: Any
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    from airflow_provider_disttrain.decorators.base import DecoratedTrainingJobOperator

    bag = DagBag(str(example_dags / EXAMPLE.name))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("disttrain_taskflow_decorators")
    decorated = [t for t in dag.tasks if isinstance(t, DecoratedTrainingJobOperator)]
    assert sorted(t.task_id for t in decorated) == ["evaluate", "train"]
    for operator in decorated:
        operator.env = PROVIDER_ON_PATH

    result = DagRunResult(dag.test())

    assert result.state == "success", result.task_states
    [pytorch_job] = [job["metadata"]["name"] for job in jobs.list("pytorchjobs", executing)]
    [mpi_job] = [job["metadata"]["name"] for job in jobs.list("mpijobs", executing, version="v2beta1")]
    # 2 pods x nproc_per_node=2 under torchrun: ranks 0..3 in one gloo group, all-reduced to 0+1+2+3.
    assert result.xcom("train") == {
        "model_uri": "s3://example-bucket/datasets/v3/model-lr0.01",
        "world_size": 4,
        "rank": 0,
        "rank_sum": 6,
        "hosts": [f"{pytorch_job}-master-0", f"{pytorch_job}-worker-0"],
        "epochs": 2,
    }
    # mpirun started one rank in each worker pod (reached over ssh through the hostfile's names).
    assert result.xcom("evaluate") == {
        "model_uri": "s3://example-bucket/datasets/v3/model-lr0.01",
        "accuracy": 0.9,
        "ranks": 2,
        "hosts": [f"{mpi_job}-worker-0", f"{mpi_job}-worker-1"],
    }
    assert result.xcom("report").endswith("trained on 4 processes, accuracy 0.9 on 2 MPI ranks")
    master = jobs.core.read_namespaced_pod(f"{pytorch_job}-master-0", executing)
    assert master.spec.node_name == "disttrain-exec-0"
    assert json.loads(master.status.container_statuses[0].state.terminated.message)["rank_sum"] == 6


FAILING_DAG = """
import pendulum
from airflow.sdk import dag, task
from airflow_provider_disttrain.parameters import WaitPolicy


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    @task
    def shards():
        return 3

    @task.pytorch_job(
        image="disttrain-pytorch:local", num_workers=1, restart_policy="Never",
        wait_policy=WaitPolicy(poll_interval=1), job_name={job_name!r}, env={env!r},
    )
    def train(count):
        return {{"shards": set(range(count))}}  # a set is not JSON

    train(shards())


pipeline()
"""


def test_a_value_that_cannot_become_an_xcom_fails_the_task_with_the_reason(
    executing: str, run_dag: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dag_id = unique_dag_id("deco_fail")
    job_name = f"deco-{dag_id[-6:]}"
    result = run_dag(dag_id, FAILING_DAG.format(dag_id=dag_id, job_name=job_name, env=PROVIDER_ON_PATH))

    assert result.task_state("shards") == "success"
    assert result.task_state("train") == "failed"
    output = "".join(capfd.readouterr())
    assert "JobFailedError" in output
    # Written by rank 0 to the termination message, shown by the operator's failure explanation.
    assert (
        f"master-0 ({job_name}-master-0): Failed - container pytorch: Error, exit code 1; train failed on rank 0: "
        "ResultError: the value rank 0 returned (dict) cannot become the task's XCom" in output
    )
    # torchrun's own report of its failed child, from the Master's log (copied into the task log).
    assert "torch.distributed.elastic.multiprocessing.errors.ChildFailedError" in output
