"""Fine-tuning on Kubeflow Trainer v2: a TrainJob on the ``torch-distributed`` ClusterTrainingRuntime.

The runtime (installed with Trainer) holds the pods' template and launches ``torchrun`` with the
PET_* variables on every node; the TrainJob overrides only what this pipeline decides: the image,
the command, the node count and each node's GPUs. The task waits in the triggerer and returns the
same summary as the other training operators (``replica_statuses`` per replicated job: ``node``).
Point ``kubernetes_default`` at a cluster with Trainer v2.3 (the service account needs the Role and
the ClusterRole of ``deploy/rbac/``) and build the image from ``training/pytorch/``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_disttrain import CleanupPolicy, TrainJobOperator, WaitPolicy

IMAGE = "ghcr.io/example/disttrain-pytorch:0.1.0"
# Kueue: the LocalQueue that admits the job when its ClusterQueue has GPUs to spare (the operator's
# ``local_queue`` sets the TrainJob's kueue.x-k8s.io/queue-name label). Until then the TrainJob waits
# suspended, the task log says why (the Workload's message), and that wait does not count toward
# ``startup_timeout``; ``queue_timeout`` bounds it. Without ``local_queue`` the job runs unqueued, as on a
# cluster without Kueue. Not named ``default``: Kueue puts every unlabelled job of a namespace into a
# LocalQueue of that name.
LOCAL_QUEUE = "user-queue"


@dag(
    dag_id="disttrain_trainjob_finetune",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["disttrain", "example", "trainer-v2"],
)
def trainjob_finetune() -> None:
    finetune = TrainJobOperator(
        task_id="finetune",
        runtime="torch-distributed",
        image=IMAGE,
        command=["torchrun", "/workspace/train_ddp.py"],
        args=["--epochs", "3", "--output-dir", "/workspace/output/{{ run_id }}"],
        env={"NCCL_DEBUG": "WARN"},
        num_nodes=2,
        gpus_per_node=1,
        resources_per_node={"requests": {"cpu": "4", "memory": "16Gi"}},
        local_queue=LOCAL_QUEUE,
        deferrable=True,
        execution_timeout=timedelta(hours=6),
        wait_policy=WaitPolicy(queue_timeout=timedelta(hours=12), startup_timeout=timedelta(minutes=30)),
        cleanup_policy=CleanupPolicy(on_finish="succeeded"),
    )

    @task
    def report(result: dict[str, Any]) -> str:
        nodes = result["replica_statuses"].get("node", {})
        print(f"TrainJob {result['name']}: {result['state']} in {result['duration_seconds']}s, nodes {nodes}")
        return str(result["name"])

    report(finetune.output)


trainjob_finetune()
