"""MultiKueue with an MPIJob: dispatched to the worker cluster, run there by the worker's mpi-operator.

The worker's mpi-operator runs in a network namespace of its own (dev/cluster/README.md "Two clusters",
"mpi-operator in a network namespace"). Through the public ``MPIJobOperator`` and the real runtime
(``dag.test()``), sync and deferred: the job's Workload is dispatched to ``disttrain-worker``, its
launcher Job completes there, the result names the worker cluster, and no pod ran on the manager.

The environment's fixtures (``worker_api``, ``multikueue``) are tests/integration/conftest.py's.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import MULTIKUEUE_CONN_ID as CONN_ID
from tests.integration.conftest import MULTIKUEUE_QUEUE as QUEUE
from tests.integration.conftest import WORKER_CLUSTER as WORKER
from tests.integration.conftest import unique_dag_id

DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    MPIJobOperator(
        task_id="train",
        image="mpioperator/mpi-pi:openmpi",
        command=["mpirun", "-n", "1", "/home/mpiuser/pi"],
        num_workers=1,
        gpus_per_replica=1,
        local_queue={queue!r},
        worker_clusters={{{worker!r}: {conn_id!r}}},
        annotations={{"disttrain.test/run-seconds": "4"}},
        deferrable={deferrable!r},
        wait_policy=WaitPolicy(poll_interval=1, startup_timeout=120),
    )


pipeline()
"""


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_dispatched_mpijob_runs_on_the_worker_cluster(
    multikueue: str, run_dag: Any, admin_api: Any, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    from kubernetes import client

    dag_id = unique_dag_id("multikueue_mpi")
    source = DAG.format(dag_id=dag_id, queue=QUEUE, worker=WORKER, conn_id=CONN_ID, deferrable=deferrable)
    result = run_dag(dag_id, source)

    output = "".join(capfd.readouterr())
    assert result.task_state("train") == "success", output[-4000:]
    value = result.xcom("train")
    assert value["kind"] == "MPIJob"
    assert value["state"] == "succeeded"
    assert value["cluster"] == WORKER
    # Mirrored from the worker: only its mpi-operator ran this job (the manager's leaves a job that
    # MultiKueue manages alone).
    assert value["replica_statuses"]["Launcher"]["succeeded"] == 1
    manager_pods = client.CoreV1Api(admin_api).list_namespaced_pod(multikueue).items
    assert manager_pods == [], "the job's pods must run on the worker only"
    manager_jobs = client.BatchV1Api(admin_api).list_namespaced_job(multikueue).items
    assert manager_jobs == [], "the launcher Job must be created on the worker only"
