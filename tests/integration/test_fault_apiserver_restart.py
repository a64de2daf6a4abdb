"""The API server restarts while a task is deferred: the trigger loses its watch, keeps trying, picks
the job up again when the server is back, and the task ends with the job's real outcome."""

from __future__ import annotations

import threading
import time

import pytest
from tests.integration.conftest import cluster_script, unique_dag_id

DEFERRED_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    PyTorchJobOperator(
        task_id="train",
        job_name="{job_name}",
        image="busybox:1.36",
        command=["python", "train.py"],
        num_workers=1,
        restart_policy="Never",
        annotations={annotations!r},
        deferrable=True,
        poll_interval=2,
    )

pipeline()
"""


@pytest.mark.parametrize(
    ("annotations", "task_state"),
    [
        ({"disttrain.test/run-seconds": "25"}, "success"),
        ({"disttrain.test/run-seconds": "25", "disttrain.test/exit-code": "1"}, "failed"),
    ],
    ids=["job-succeeds", "job-fails"],
)
def test_trigger_survives_an_api_server_restart(namespace, run_dag, jobs, annotations, task_state):
    dag_id = unique_dag_id("restart")
    job_name = f"restart-{dag_id[-6:]}"
    restarted = threading.Event()
    errors: list[BaseException] = []

    def restart_when_deferred() -> None:
        try:
            # Wait until the job runs (the task has deferred by then), then bounce the API server.
            jobs.wait_for(lambda: len(jobs.pods(namespace, job_name)) == 2, timeout=60, what="running pods")
            time.sleep(2)
            cluster_script("restart.sh", "kube-apiserver")
            restarted.set()
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    bouncer = threading.Thread(target=restart_when_deferred, daemon=True)
    bouncer.start()
    result = run_dag(dag_id, DEFERRED_DAG.format(dag_id=dag_id, job_name=job_name, annotations=annotations))
    bouncer.join(timeout=120)

    assert not errors, errors
    assert restarted.is_set(), "the API server was not restarted while the task was deferred"
    assert result.task_state("train") == task_state
