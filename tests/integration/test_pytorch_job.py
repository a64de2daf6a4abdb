"""PyTorchJobs through the public operator and the real Airflow runtime (``dag.test()``), on the local
control plane with the real training-operator, in deferrable and sync mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import unique_dag_id

MANIFEST = Path(__file__).resolve().parents[1] / "fixtures" / "manifests" / "pytorchjob.yaml"

TRAIN_AND_CHECK = """
import pendulum
from airflow.sdk import dag, task
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    train = PyTorchJobOperator(task_id="train", {operator_args})

    @task
    def check(result):
        assert result["state"] == "succeeded", result
        return result

    check(train.output)

pipeline()
"""


@pytest.mark.xdist_group("gpus")  # runs 3 pods of 1 GPU: with the other tests that hold GPUs, one at a time
@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
def test_pytorchjob_from_builder_parameters_succeeds(namespace, run_dag, jobs, deferrable):
    dag_id = unique_dag_id("pt_builder")
    args = (
        f"image='busybox:1.36', command=['python', 'train.py'], num_workers=2, gpus_per_replica=1, "
        f"deferrable={deferrable}, wait_policy=WaitPolicy(poll_interval=1, startup_timeout=120)"
    )
    result = run_dag(dag_id, TRAIN_AND_CHECK.format(dag_id=dag_id, operator_args=args))

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert summary["state"] == "succeeded"
    assert summary["kind"] == "PyTorchJob"
    assert summary["namespace"] == namespace
    assert summary["replica_statuses"]["Master"]["succeeded"] == 1
    assert summary["duration_seconds"] is not None and summary["duration_seconds"] >= 0
    assert [c["type"] for c in summary["conditions"] if c["status"] == "True"][-1] == "Succeeded"
    # The XComs handed on as soon as the job existed name the job that really ran.
    assert result.xcom("train", key="job_name") == summary["name"]
    live = jobs.get("pytorchjobs", namespace, summary["name"])
    assert live["metadata"]["uid"] == summary["uid"]
    assert live["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    labels = live["metadata"]["labels"]
    assert labels["disttrain.airflow.apache.org/dag-id"] == dag_id
    assert labels["disttrain.airflow.apache.org/task-id"] == "train"
    # What the job held, from its pods' container times: a Master and 2 Workers of 1 GPU each, each pod
    # holding its GPU at most as long as any pod of the job ran (both figures rounded to 0.1 s).
    usage = summary["usage"]
    assert usage["gpus"] == 3
    assert usage["running_seconds"] is not None and usage["running_seconds"] > 0
    assert 0 < usage["gpu_seconds"] <= usage["gpus"] * usage["running_seconds"] + 0.15
    assert usage["queued_seconds"] is not None and usage["queued_seconds"] >= 0
    # Recorded on the job kept (cleanup_policy keeps it), for the jobs page.
    assert json.loads(live["metadata"]["annotations"]["disttrain.airflow.apache.org/usage"]) == usage


def test_pytorchjob_from_manifest_file_succeeds(namespace, run_dag, jobs, airflow_db):
    # Like a team's manifest kept in git next to the DAG: a template file the operator renders.
    # The Kubeflow example names namespace "kubeflow": a team's copy names its own (a namespace parameter that
    # contradicts the manifest's is refused, as kubectl -n refuses it).
    (airflow_db / "pt_manifest.yaml").write_text(
        MANIFEST.read_text().replace("namespace: kubeflow", f"namespace: {namespace}")
    )
    dag_id = unique_dag_id("pt_manifest")
    args = (
        f"job_manifest='pt_manifest.yaml', namespace={namespace!r}, deferrable=True, "
        "wait_policy=WaitPolicy(startup_timeout=120)"
    )
    result = run_dag(dag_id, TRAIN_AND_CHECK.format(dag_id=dag_id, operator_args=args))

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert summary["state"] == "succeeded"
    # The manifest's own name is the stem of the generated one; its spec reached the cluster as written.
    assert summary["name"].startswith("pytorch-simple-")
    live = jobs.get("pytorchjobs", namespace, summary["name"])
    container = live["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    assert container["image"].startswith("docker.io/kubeflowkatib/pytorch-mnist")


DRY_RUN_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    MPIJobOperator(task_id="check", image="mpioperator/mpi-pi:openmpi", command=["mpirun", "/home/mpiuser/pi"],
                   num_workers=2, server_dry_run=True)

pipeline()
"""


def test_dry_run_is_admitted_by_the_api_server_and_creates_nothing(namespace, run_dag, jobs):
    dag_id = unique_dag_id("dry_run")
    result = run_dag(dag_id, DRY_RUN_DAG.format(dag_id=dag_id))

    assert result.task_state("check") == "success"
    admitted = result.xcom("check")
    assert admitted["kind"] == "MPIJob"
    assert admitted["namespace"] == namespace
    assert admitted["name"].startswith("check-")
    assert jobs.list("mpijobs", namespace, version="v2beta1") == []
