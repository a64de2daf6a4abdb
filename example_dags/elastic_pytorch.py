"""Elastic PyTorch: start an elastic PyTorchJob, scale its workers up while it runs, wait with the sensor.

torchrun inside each worker re-forms the group when replicas join (rendezvous via c10d). The provider
sets ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in the workers (torch >= 2.4 would stall a worker that
joins a running job): see training/README.md.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import dag

from airflow_provider_disttrain import PyTorchJobOperator, PyTorchOptions, ScaleTrainingJobOperator, TrainingJobSensor

IMAGE = "ghcr.io/example/disttrain-pytorch:0.1.0"
JOB_NAME = "{{ ti.xcom_pull(task_ids='start_elastic_job', key='job_name') }}"


@dag(
    dag_id="disttrain_elastic_pytorch",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["disttrain", "example"],
)
def elastic_pytorch() -> None:
    start = PyTorchJobOperator(
        task_id="start_elastic_job",
        image=IMAGE,
        command=["torchrun"],
        args=["--nproc_per_node=1", "/workspace/train_ddp.py", "--epochs", "5"],
        num_workers=2,
        gpus_per_replica=1,
        pytorch_options=PyTorchOptions(
            elastic_policy={"min_replicas": 1, "max_replicas": 4, "rdzv_backend": "c10d", "max_restarts": 3},
            nproc_per_node=1,
        ),
        # Return as soon as the job exists; the sensor below does the waiting.
        wait_for_completion=False,
    )
    scale_up = ScaleTrainingJobOperator(task_id="scale_up", job_name=JOB_NAME, replicas=3)
    wait = TrainingJobSensor(
        task_id="wait_for_training",
        job_name=JOB_NAME,
        deferrable=True,
        poke_interval=30,
        timeout=timedelta(hours=4).total_seconds(),
    )
    start >> scale_up >> wait


elastic_pytorch()
