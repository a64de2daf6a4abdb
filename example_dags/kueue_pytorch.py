"""A PyTorchJob that waits in a Kueue queue for GPU quota, then trains.

``local_queue`` labels the job with ``kueue.x-k8s.io/queue-name``: Kueue creates it suspended and
releases it when its ClusterQueue has the GPUs. Meanwhile the task waits in the triggerer, and its log
says why, in Kueue's words (the Workload's message), once per change. Time in the queue does not count
toward ``startup_timeout``, which starts at admission; ``queue_timeout`` bounds the wait for quota (then
the task fails and the job is deleted, so that it does not take the quota later for nobody). A job Kueue
can never admit (a LocalQueue that does not exist, more GPUs than the ClusterQueue can ever hold) fails
at once with ``JobInadmissibleError``. The result says what Kueue did: seconds queued, evictions.

The LocalQueue is not named ``default``: Kueue puts every unlabelled job of a namespace into a LocalQueue
of that name. See docs/guides/kueue.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_disttrain import CleanupPolicy, PyTorchJobOperator, WaitPolicy


@dag(
    dag_id="disttrain_kueue_pytorch",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["disttrain", "example", "kueue"],
)
def kueue_pytorch() -> None:
    train = PyTorchJobOperator(
        task_id="train_when_gpus_free",
        image="ghcr.io/example/disttrain-pytorch:0.1.0",
        command=["torchrun", "--nproc_per_node=1", "/workspace/train_ddp.py"],
        args=["--epochs", "3"],
        num_workers=1,
        gpus_per_replica=1,
        local_queue="user-queue",  # the Kueue LocalQueue in the job's namespace
        deferrable=True,
        wait_policy=WaitPolicy(
            queue_timeout=timedelta(hours=6),  # not admitted by then: fail, and delete the job
            startup_timeout=timedelta(minutes=15),  # counted from admission, not from submission
        ),
        cleanup_policy=CleanupPolicy(on_finish="succeeded"),
    )

    @task
    def report(result: dict[str, Any]) -> dict[str, Any]:
        kueue = result.get("kueue") or {}
        print(
            f"{result['name']}: {result['state']} after {kueue.get('queued_seconds')}s in "
            f"{kueue.get('local_queue')} ({kueue.get('evictions')} evictions), {result.get('metrics')}"
        )
        return {"state": result["state"], "queued_seconds": kueue.get("queued_seconds")}

    report(train.output)


kueue_pytorch()
