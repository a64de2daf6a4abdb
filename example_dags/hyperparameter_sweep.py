"""Hyperparameter sweep: one PyTorchJob per configuration with dynamic task mapping, then pick the best.

Each mapped task instance gets its own job (the map index is part of the job's labels, so a retry
of one configuration reattaches to that configuration's job and no other).
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import dag, task

from airflow_provider_disttrain import PyTorchJobOperator

IMAGE = "ghcr.io/example/disttrain-pytorch:0.1.0"
CONFIGURATIONS = [
    {"learning_rate": 0.1, "batch_size": 64},
    {"learning_rate": 0.01, "batch_size": 64},
    {"learning_rate": 0.01, "batch_size": 256},
]


@dag(
    dag_id="disttrain_hyperparameter_sweep",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["disttrain", "example"],
)
def hyperparameter_sweep() -> None:
    @task
    def trial_args() -> list[list[str]]:
        return [
            ["--epochs", "2", "--lr", str(c["learning_rate"]), "--batch-size", str(c["batch_size"])]
            for c in CONFIGURATIONS
        ]

    trials = PyTorchJobOperator.partial(
        task_id="trial",
        image=IMAGE,
        command=["python", "/workspace/train_ddp.py"],
        num_workers=1,
        gpus_per_replica=1,
        deferrable=True,
        max_active_tis_per_dag=2,  # at most two trials hold GPUs at once
    ).expand(args=trial_args())

    @task
    def pick_best(results: list[dict[str, Any]]) -> dict[str, Any]:
        """The fastest successful trial (with real metrics, rank by the metric the script reports)."""
        succeeded = [r for r in results if r["state"] == "succeeded"]
        if not succeeded:
            raise ValueError("no trial succeeded")
        best = min(succeeded, key=lambda r: r["duration_seconds"] or float("inf"))
        print(f"best trial: {best['name']} ({best['duration_seconds']}s) out of {len(results)}")
        return {"name": best["name"], "duration_seconds": best["duration_seconds"], "trials": len(results)}

    pick_best(trials.output)


hyperparameter_sweep()
