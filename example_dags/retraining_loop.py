"""Retrain until good enough (Airflow 3.4 Task Loops): train a few epochs, evaluate, repeat from the checkpoint.

Requires Airflow 3.4 (``@task_group`` ``.loop()``; docs/guides/airflow-3.4.md). On Airflow 3.2-3.3 the
file does not parse; leave it out of those deployments' DAGs folders.

``prepare_data`` writes one dataset for the run. Then the ``retrain`` task group repeats, at most
``MAX_ITERATIONS`` times:

* ``plan_iteration`` gives the iteration a checkpoint directory of its own on the shared volume and
  copies the previous iteration's checkpoint into it, so the job resumes where the previous one stopped
  (``train_ddp.py`` resumes from ``--checkpoint-dir`` and counts ``--epochs`` in total: each iteration
  trains ``EPOCHS_PER_ITERATION`` more); a retry of the iteration resumes from its own directory;
* ``train`` runs ``train_ddp.py`` on Master + 1 Worker: one PyTorchJob per iteration, labelled
  ``disttrain.airflow.apache.org/loop-iteration`` (``kubectl get pytorchjobs -l ...loop-iteration=2``)
  and kept after it finishes, for comparison;
* ``evaluate`` computes the accuracy of the model the iteration wrote on held-out rows;

and the loop stops as soon as the accuracy reaches ``TARGET_ACCURACY``, or when the iteration budget is
spent (a stop, not a failure: the last model is the best one trained; its accuracy is in the log).

Storage and images are those of example_dags/retraining_pipeline.py: the pods mount the
``training-data`` claim at ``/mnt/shared``, the Airflow workers see the same files at the same path.
"""

from __future__ import annotations

import csv
import json
import random
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import LoopDecision, dag, task, task_group

from airflow_provider_disttrain import PodOptions, PyTorchJobOperator, WaitPolicy

IMAGE = "ghcr.io/example/disttrain-pytorch:0.1.0"
POD_SHARED = "/mnt/shared"
SHARED_STORAGE = Path(POD_SHARED)
SHARED_VOLUME = {"name": "shared", "persistentVolumeClaim": {"claimName": "training-data"}}
SHARED_MOUNT = {"name": "shared", "mountPath": POD_SHARED}
# No root needed (PodSecurity "restricted"); fsGroup makes the shared volume writable for the trainer.
TRAINER_POD = {
    "spec": {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "fsGroup": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "pytorch",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
}
TARGET_ACCURACY = 0.95
MAX_ITERATIONS = 3
EPOCHS_PER_ITERATION = 2
FEATURES = 8
CHECKPOINT = "checkpoint.pt"


def predict(model: dict[str, Any], features: list[float]) -> int:
    """train_ddp.py's model (Linear, ReLU, Linear) from its ``model.json``: the class with the highest output."""
    hidden_layer, output_layer = model["layers"]
    hidden = [
        max(0.0, sum(w * x for w, x in zip(row, features, strict=True)) + b)
        for row, b in zip(hidden_layer["weight"], hidden_layer["bias"], strict=True)
    ]
    outputs = [
        sum(w * h for w, h in zip(row, hidden, strict=True)) + b
        for row, b in zip(output_layer["weight"], output_layer["bias"], strict=True)
    ]
    return max(range(len(outputs)), key=outputs.__getitem__)


def good_enough(*, loop: Any) -> LoopDecision:
    """Stop at the target accuracy, or when the budget is spent (Airflow fails a loop that runs out)."""
    accuracy = loop.result["accuracy"]
    if accuracy >= TARGET_ACCURACY:
        return LoopDecision(stop=True, reason=f"accuracy {accuracy:.4f} reached {TARGET_ACCURACY}")
    spent = loop.index + 1 >= loop.max_iterations
    verdict = "iteration budget spent" if spent else "training on"
    return LoopDecision(stop=spent, reason=f"accuracy {accuracy:.4f} < {TARGET_ACCURACY}: {verdict}")


@dag(
    dag_id="disttrain_retraining_loop",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=2)},
    tags=["disttrain", "example", "airflow-3.4"],
)
def retraining_loop() -> None:
    @task
    def prepare_data(run_id: str | None = None) -> dict[str, str]:
        """This run's dataset (two classes split by a hyperplane) and where its iterations keep their files."""
        assert run_id is not None
        run = "".join(c if c.isalnum() or c in "_.-" else "_" for c in run_id)  # run ids hold ':' and '+'
        directory = SHARED_STORAGE / "datasets" / run
        directory.mkdir(parents=True, exist_ok=True)
        generator = random.Random(run)
        weights = [generator.uniform(-1, 1) for _ in range(FEATURES)]
        rows = []
        for _ in range(2500):
            features = [round(generator.gauss(0, 1), 5) for _ in range(FEATURES)]
            rows.append([*features, int(sum(w * x for w, x in zip(weights, features, strict=True)) > 0)])
        header = [f"f{i}" for i in range(FEATURES)] + ["label"]
        for file_name, part in (("train.csv", rows[:2000]), ("holdout.csv", rows[2000:])):
            with (directory / file_name).open("w", newline="") as file:
                csv.writer(file).writerows([header, *part])
        return {"run": run}

    @task_group
    def retrain(data: dict[str, str]) -> None:
        @task
        def plan_iteration(data: dict[str, str], *, loop: Any) -> dict[str, Any]:
            """This iteration's directories; its checkpoint starts as the previous iteration's."""
            run, index = data["run"], loop.index
            checkpoints = SHARED_STORAGE / "checkpoints" / run
            mine = checkpoints / f"iteration-{index}"
            mine.mkdir(parents=True, exist_ok=True)
            previous = checkpoints / f"iteration-{index - 1}" / CHECKPOINT
            # Only once: a retry of this iteration resumes from the epochs it already trained.
            if index > 0 and not (mine / CHECKPOINT).exists():
                shutil.copy2(previous, mine / CHECKPOINT)
                print(f"iteration {index} resumes from {previous}")
            return {
                "iteration": index,
                "model_dir": f"{POD_SHARED}/models/{run}/iteration-{index}",
                "args": [
                    "--data",
                    f"{POD_SHARED}/datasets/{run}/train.csv",
                    "--epochs",
                    str(EPOCHS_PER_ITERATION * (index + 1)),  # in total, counting the resumed ones
                    "--output-dir",
                    f"{POD_SHARED}/models/{run}/iteration-{index}",
                    "--checkpoint-dir",
                    f"{POD_SHARED}/checkpoints/{run}/iteration-{index}",
                ],
            }

        plan = plan_iteration(data)
        train = PyTorchJobOperator(
            task_id="train",
            job_manifest={
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {"replicas": 1, "template": TRAINER_POD},
                        "Worker": {"template": TRAINER_POD},
                    }
                }
            },
            image=IMAGE,
            command=["python", "/workspace/train_ddp.py"],
            args=plan["args"],
            num_workers=1,
            replica_resources={"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
            deferrable=True,
            execution_timeout=timedelta(hours=2),
            pod_options=PodOptions(shm_size="1Gi", volumes=[SHARED_VOLUME], volume_mounts=[SHARED_MOUNT]),
            wait_policy=WaitPolicy(startup_timeout=timedelta(minutes=30)),
        )

        @task
        def evaluate(result: dict[str, Any], plan: dict[str, Any], data: dict[str, str]) -> dict[str, Any]:
            """The held-out accuracy of the model this iteration's job wrote."""
            model_dir = SHARED_STORAGE / "models" / data["run"] / f"iteration-{plan['iteration']}"
            model = json.loads((model_dir / "model.json").read_text())
            with (SHARED_STORAGE / "datasets" / data["run"] / "holdout.csv").open(newline="") as file:
                rows = [[float(cell) for cell in row] for row in list(csv.reader(file))[1:]]
            accuracy = sum(predict(model, row[:-1]) == int(row[-1]) for row in rows) / len(rows)
            print(f"iteration {plan['iteration']}: job {result['name']}, held-out accuracy {accuracy:.4f}")
            return {
                "iteration": plan["iteration"],
                "job": result["name"],
                "accuracy": accuracy,
                "metrics": result.get("metrics"),
            }

        evaluate(train.output, plan, data)

    retrain.partial(data=prepare_data()).loop(max_iterations=MAX_ITERATIONS, until=good_enough)


retraining_loop()
