"""Weekly retraining: prepare data -> train a PyTorchJob on GPUs (deferrable) -> evaluate -> promote or not.

The training step's result (state, duration, replica statuses, and ``metrics``: the JSON object
the Master's ``train_ddp.py`` wrote to its termination message) comes back through XCom; the
evaluation promotes the model only when the job succeeded and ``metrics["accuracy"]`` is high enough.
Point ``kubernetes_default`` at your cluster and build the image from ``training/pytorch/``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy

IMAGE = os.environ.get("DISTTRAIN_PYTORCH_IMAGE", "ghcr.io/example/disttrain-pytorch:0.1.0")
SHARED_VOLUME = {"name": "shared", "persistentVolumeClaim": {"claimName": "training-data"}}
SHARED_MOUNT = {"name": "shared", "mountPath": "/mnt/shared"}
MIN_ACCURACY = 0.80
# The local test cluster (kwok) runs no containers: there the pods "write" their termination message
# through this annotation, which the simulated kubelet reads, filled from the Airflow Variable
# ``disttrain_simulated_metrics`` (the demo and the tests set it). A real cluster runs train_ddp.py,
# which writes the message itself; the annotation is then empty and nothing reads it.
SIMULATED_METRICS = {"disttrain.test/termination-message": "{{ var.value.get('disttrain_simulated_metrics', '') }}"}


@dag(
    dag_id="disttrain_retraining_pipeline",
    schedule="@weekly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    tags=["disttrain", "example"],
)
def retraining_pipeline() -> None:
    @task
    def prepare_data(ds: str | None = None) -> str:
        """Snapshot this week's training data; returns the dataset path the job reads."""
        return f"/mnt/shared/datasets/{ds}/train.pt"

    dataset = prepare_data()

    train = PyTorchJobOperator(
        task_id="train",
        image=IMAGE,
        command=["python", "/workspace/train_ddp.py"],
        args=[
            "--data",
            "{{ ti.xcom_pull(task_ids='prepare_data') }}",
            "--epochs",
            "3",
            "--output-dir",
            "/mnt/shared/models/{{ ds }}",
        ],
        num_workers=2,
        gpus_per_replica=1,
        replica_resources={"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "16Gi"}},
        deferrable=True,
        execution_timeout=timedelta(hours=6),
        annotations=SIMULATED_METRICS,
        run_policy=RunPolicy(clean_pod_policy="Running"),
        pod_options=PodOptions(shm_size="2Gi", volumes=[SHARED_VOLUME], volume_mounts=[SHARED_MOUNT]),
        wait_policy=WaitPolicy(startup_timeout=timedelta(minutes=30)),
        cleanup_policy=CleanupPolicy(on_finish="succeeded"),
    )
    dataset >> train

    @task.branch
    def evaluate(result: dict[str, Any]) -> str:
        """Promote when the job succeeded on every replica and the model is accurate enough."""
        failed_replicas = sum(counts["failed"] for counts in result["replica_statuses"].values())
        print(f"Job {result['name']}: {result['state']} in {result['duration_seconds']}s, {failed_replicas} failed")
        if result["state"] != "succeeded" or failed_replicas:
            return "keep_current_model"
        accuracy = (result.get("metrics") or {}).get("accuracy")
        if accuracy is None:
            # The task log says why (no termination message, not JSON, leader pod gone).
            print("The training reported no accuracy: keeping the current model")
            return "keep_current_model"
        print(f"accuracy={accuracy} (threshold {MIN_ACCURACY})")
        return "promote_model" if float(accuracy) >= MIN_ACCURACY else "keep_current_model"

    @task
    def promote_model(result: dict[str, Any]) -> str:
        print(f"Promoting the model trained by {result['kind']} {result['namespace']}/{result['name']}")
        return result["name"]

    @task
    def keep_current_model() -> None:
        print("Keeping the current production model")

    decision = evaluate(train.output)
    decision >> [promote_model(train.output), keep_current_model()]


retraining_pipeline()
