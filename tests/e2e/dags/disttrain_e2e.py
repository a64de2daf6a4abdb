"""DAGs the end-to-end tests trigger through Airflow's REST API (copied into .devairflow/dags/).

Each run's ``conf`` sets how many training jobs start and how long their pods run on the local
(kwok) cluster, through the ``disttrain.test/run-seconds`` pod annotation. Jobs are never deleted on
finish, so a test can count them afterwards; the tests delete them themselves.

The fan-out and the synchronous DAGs create their jobs suspended (``runPolicy.suspend``), as a
queueing system such as Kueue holds a job until it admits it: their tasks wait for as long as the test
needs, however slowly the machine starts them, and the test then releases the jobs.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import dag, task

from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy

RUN_SECONDS = "disttrain.test/run-seconds"
COMMON = {
    "image": "busybox:1.36",
    "command": ["python", "train.py"],
    "num_workers": 1,
    "wait_policy": WaitPolicy(poll_interval=2),
    "cleanup_policy": CleanupPolicy(on_finish="never"),
}
START = pendulum.datetime(2026, 1, 1, tz="UTC")
HELD = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"runPolicy": {"suspend": True}}}


@dag(dag_id="disttrain_e2e_fanout", schedule=None, start_date=START, max_active_tasks=1000, tags=["disttrain-e2e"])
def fanout() -> None:
    """``conf["count"]`` deferred training tasks (one mapped task) whose jobs wait suspended until released."""

    @task
    def shards(dag_run=None) -> list[list[str]]:
        return [["--shard", str(index)] for index in range(int(dag_run.conf.get("count", 10)))]

    PyTorchJobOperator.partial(
        task_id="train",
        deferrable=True,
        job_manifest=HELD,
        # One pod per job: 100 jobs fit the local cluster's 220 pod slots next to other tests' pods.
        with_master=False,
        annotations={RUN_SECONDS: "{{ dag_run.conf.get('run_seconds', 5) }}"},
        **COMMON,
    ).expand(args=shards())


@dag(dag_id="disttrain_e2e_long", schedule=None, start_date=START, tags=["disttrain-e2e"])
def long_running() -> None:
    """One deferred training task whose first try's job runs 10 minutes and any later try's 20 s.

    20 s, not less: a deferred task whose job ends within seconds of the deferral can be failed by
    Airflow 3.3's stale-executor-event race (apache/airflow#71580) on a loaded machine."""
    PyTorchJobOperator(
        task_id="train",
        deferrable=True,
        annotations={RUN_SECONDS: "{{ '600' if ti.try_number == 1 else '20' }}"},
        **COMMON,
    )


@dag(
    dag_id="disttrain_e2e_sync",
    schedule=None,
    start_date=START,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=1)},
    tags=["disttrain-e2e"],
)
def synchronous() -> None:
    """One training task waiting in its worker process (not deferred) on a job held suspended."""
    PyTorchJobOperator(
        task_id="train",
        deferrable=False,
        job_manifest=HELD,
        annotations={RUN_SECONDS: "{{ dag_run.conf.get('run_seconds', 5) }}"},
        **COMMON,
    )


@dag(
    dag_id="disttrain_e2e_orphan",
    schedule=None,
    start_date=START,
    default_args={"retries": 0},
    tags=["disttrain-e2e"],
)
def orphan() -> None:
    """Three training tasks whose jobs run 10 minutes: two wait in their worker process (the test
    SIGKILLs the first one's), one waits deferred in the triggerer."""
    long_job = {**COMMON, "annotations": {RUN_SECONDS: "600"}}
    PyTorchJobOperator(task_id="killed", deferrable=False, **long_job)
    PyTorchJobOperator(task_id="waiting", deferrable=False, **long_job)
    PyTorchJobOperator(task_id="deferred", deferrable=True, **long_job)


fanout()
long_running()
synchronous()
orphan()
