"""Manifest-first: the job lives in a templated Kubeflow YAML file next to the DAG, kept in git.

The operator renders the file with Jinja (``{{ params.* }}``, the run's date), validates it and submits
it; builder parameters given here would win over the file, so the file stays the source of truth.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag

from airflow_provider_disttrain import PyTorchJobOperator, WaitPolicy


@dag(
    dag_id="disttrain_manifest_first",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "image": Param("ghcr.io/example/disttrain-pytorch:0.1.0", type="string"),
        "workers": Param(2, type="integer", minimum=1),
        "epochs": Param(3, type="integer", minimum=1),
    },
    tags=["disttrain", "example"],
)
def manifest_first() -> None:
    PyTorchJobOperator(
        task_id="train_from_manifest",
        job_manifest="manifests/pytorchjob.yaml",
        deferrable=True,
        wait_policy=WaitPolicy(startup_timeout=timedelta(minutes=30)),
    )


manifest_first()
