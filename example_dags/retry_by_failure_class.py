"""Retry what the infrastructure broke, never what the training broke (Airflow 3.3's ``retry_policy``).

When a training job fails, the provider's error says whose failure it was: the training's own (a
traceback, a non-zero exit, an OOMKill: ``TrainingFailureError``) or the infrastructure's (an eviction,
a preemption, a lost node, an image pull, a deadline: ``InfrastructureFailureError``).
``DisttrainRetryPolicy`` fails the task at once on the first (eight GPUs are not spent again on a bug)
and on a job Kueue can never admit, retries the second after ``infrastructure_delay`` (within
``retries``), and leaves any other error to ``retries`` and ``retry_delay``. On Airflow 3.4 a
preemption, a drained or a lost node is rescheduled instead, without using a retry (``max_reschedules``).

Whatever happened, ``explain`` reads the failure's class from the training task's XCom ``failure``
(``{"class", "reason", "evidence"}``). Needs Airflow 3.3; see docs/guides/failures.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_disttrain import DisttrainRetryPolicy, PyTorchJobOperator


@dag(
    dag_id="disttrain_retry_by_failure_class",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["disttrain", "example"],
)
def retry_by_failure_class() -> None:
    train = PyTorchJobOperator(
        task_id="train",
        image="ghcr.io/example/disttrain-pytorch:0.1.0",
        command=["torchrun", "--nproc_per_node=1", "/workspace/train_ddp.py"],
        args=["--epochs", "3"],
        num_workers=3,
        gpus_per_replica=2,
        deferrable=True,
        retries=3,  # the most tries the policy may spend, on the infrastructure's failures only
        retry_delay=timedelta(minutes=1),  # for failures of no known class (e.g. the API server's errors)
        retry_policy=DisttrainRetryPolicy(infrastructure_delay=timedelta(minutes=10)),
    )

    @task(trigger_rule="all_done")
    def explain(ti: Any = None) -> str:
        """What ended the training task, by whose failure it was (nothing, when it succeeded)."""
        failure = ti.xcom_pull(task_ids="train", key="failure")
        if not failure:
            return "trained"
        line = f"{failure['class']} failure ({failure['reason']})"
        print(f"{line}: {failure.get('evidence')}")
        return line

    train >> explain()


retry_by_failure_class()
