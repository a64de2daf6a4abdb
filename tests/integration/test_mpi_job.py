"""An MPIJob v2beta1 through the public operator and ``dag.test()``, with the real mpi-operator (whose
launcher is a batch Job run by the real kube-controller-manager)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_disttrain.parameters import PodOptions
from tests.integration.conftest import GpuPool, gpu_pool, unique_dag_id

MPI_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import CleanupPolicy, MPIOptions, PodOptions, RunPolicy, WaitPolicy
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    MPIJobOperator(
        task_id="train",
        image="mpioperator/mpi-pi:openmpi",
        command=["mpirun", "-n", "4", "/home/mpiuser/pi"],
        num_workers=2,
        mpi_options=MPIOptions(slots_per_worker=2),
        gpus_per_replica=2,
        deferrable={deferrable},
        pod_options={pod_options},
        wait_policy=WaitPolicy(poll_interval=1, startup_timeout=120),
    )

pipeline()
"""


@pytest.fixture
def pool(admin_api: Any, namespace: str) -> Iterator[GpuPool]:
    """A kwok node of the test's own for its 4 GPUs: it neither takes nor waits for the shared nodes' GPUs."""
    with gpu_pool(admin_api, namespace) as pool:
        yield pool


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
def test_mpijob_succeeds_with_real_status(namespace, run_dag, jobs, pool, deferrable):
    dag_id = unique_dag_id("mpi")
    pod_options = PodOptions(node_selector=pool.node_selector, tolerations=pool.tolerations)
    result = run_dag(dag_id, MPI_DAG.format(dag_id=dag_id, deferrable=deferrable, pod_options=pod_options))

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert summary["kind"] == "MPIJob"
    assert summary["state"] == "succeeded"
    assert summary["replica_statuses"]["Launcher"]["succeeded"] == 1
    live = jobs.get("mpijobs", namespace, summary["name"], version="v2beta1")
    assert live["spec"]["slotsPerWorker"] == 2
    worker = live["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    launcher = live["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert "resources" not in launcher or "nvidia.com/gpu" not in launcher["resources"].get("limits", {})
    assert worker["command"] == ["/usr/sbin/sshd", "-De"]
