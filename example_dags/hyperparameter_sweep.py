"""Hyperparameter sweep: one PyTorchJob per configuration with dynamic task mapping, then pick the best.

Each mapped task instance gets its own job (the map index is part of the job's labels, so a retry
of one configuration reattaches to that configuration's job and no other). ``train_ddp.py`` ends by
writing its final ``loss`` and ``accuracy`` to its termination message; each trial's task returns them
as ``metrics``, and ``pick_best`` ranks the trials by that accuracy.
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
METRIC = "accuracy"  # on the trainer's validation split; higher is better


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
        """The trial with the best held-out accuracy, as the trainer reported it (its ``metrics``)."""
        # In map-index order: trial i ran CONFIGURATIONS[i].
        ranked = [
            (result["metrics"][METRIC], configuration, result)
            for configuration, result in zip(CONFIGURATIONS, results, strict=True)
            if result["state"] == "succeeded" and METRIC in (result.get("metrics") or {})
        ]
        if not ranked:
            raise ValueError(f"no trial succeeded and reported {METRIC!r}: nothing to compare")
        score, configuration, best = max(ranked, key=lambda trial: trial[0])
        print(f"best trial: {best['name']} {configuration} with {METRIC}={score}, out of {len(results)}")
        return {"name": best["name"], METRIC: score, "configuration": configuration, "trials": len(results)}

    pick_best(trials.output)


hyperparameter_sweep()
