"""Horovod on MPI: an MPIJob whose launcher runs ``horovodrun`` across the workers, then a report."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_disttrain import MPIJobOperator, MPIOptions, RunPolicy, WaitPolicy

IMAGE = "ghcr.io/example/disttrain-horovod:0.1.0"
WORKERS = 2
GPUS_PER_WORKER = 2


@dag(
    dag_id="disttrain_horovod_mpi",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=2)},
    tags=["disttrain", "example"],
)
def horovod_mpi() -> None:
    train = MPIJobOperator(
        task_id="train_horovod",
        image=IMAGE,
        command=[
            "horovodrun",
            "-np",
            str(WORKERS * GPUS_PER_WORKER),
            "--hostfile",
            "/etc/mpi/hostfile",
            "python",
            "/workspace/train_horovod.py",
            "--epochs",
            "2",
        ],
        num_workers=WORKERS,
        gpus_per_replica=GPUS_PER_WORKER,
        mpi_options=MPIOptions(
            slots_per_worker=GPUS_PER_WORKER,
            mpi_implementation="OpenMPI",
            launcher_creation_policy="WaitForWorkersReady",
        ),
        deferrable=True,
        execution_timeout=timedelta(hours=4),
        replica_resources={
            "Worker": {"limits": {"cpu": "8", "memory": "32Gi"}},
            "Launcher": {"limits": {"cpu": "1", "memory": "2Gi"}},
        },
        run_policy=RunPolicy(clean_pod_policy="Running"),
        wait_policy=WaitPolicy(startup_timeout=timedelta(minutes=20)),
    )

    @task
    def report(result: dict[str, Any]) -> dict[str, Any]:
        summary = {
            "job": f"{result['namespace']}/{result['name']}",
            "state": result["state"],
            "duration_seconds": result["duration_seconds"],
            "workers": result["replica_statuses"].get("Worker", {}),
        }
        print(f"Horovod run: {summary}")
        return summary

    report(train.output)


horovod_mpi()
