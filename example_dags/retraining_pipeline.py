"""Weekly retraining: prepare data -> train a PyTorchJob (deferrable) -> evaluate the model -> promote or not.

The data and the model travel through storage that both this Airflow worker and the training pods
reach: the pods mount the ``training-data`` claim at ``/mnt/shared``; the worker sees the same files
under ``SHARED_STORAGE`` (a ReadWriteMany volume mounted on the workers; with an object store, the
same steps read and write through Airflow's ``ObjectStoragePath``). Each run works in its own
directory, named after the run id (so runs without a logical date work too):

* ``prepare_data`` writes ``train.csv`` and a held-out ``holdout.csv`` (here generated; in a real
  pipeline, this week's snapshot);
* ``train`` runs ``train_ddp.py`` on Master + 2 Workers; it checkpoints every epoch to a directory
  of this task instance, the same across the task's retries (a retry resumes there), and the
  Master writes ``model.pt``, ``model.json`` and its metrics (its termination message, which comes
  back through XCom as ``metrics``);
* ``evaluate`` loads ``model.json`` and computes the accuracy on the held-out rows itself, besides
  reading the trainer's reported metrics, and promotes the model only when both are good enough;
* ``promote_model`` copies the model to ``production/`` and records where it came from.

Data-aware scheduling: the pipeline runs weekly *or* as soon as the separate ingestion DAG
(``disttrain_ingest_data``) updates the ``TRAINING_DATA`` Asset. ``train`` declares the model it writes
as the ``CANDIDATE_MODEL`` Asset: its event's ``extra`` holds the job, its metrics and the model's URI,
and ``disttrain_deploy_model``, scheduled on that Asset, starts from it alone.

The training pods need no root: they meet the PodSecurity ``restricted`` profile (``TRAINER_POD``), so
the job runs in a namespace labelled ``pod-security.kubernetes.io/enforce=restricted``.

Point ``kubernetes_default`` at your cluster and build the image from ``training/pytorch/``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Asset, AssetOrTimeSchedule, CronTriggerTimetable, dag, task

from airflow_provider_disttrain import CleanupPolicy, PodOptions, PyTorchJobOperator, RunPolicy, WaitPolicy

IMAGE = "ghcr.io/example/disttrain-pytorch:0.1.0"
# The shared volume: the pods mount it here, and the Airflow workers mount it at the same path.
POD_SHARED = "/mnt/shared"
SHARED_STORAGE = Path(POD_SHARED)
SHARED_VOLUME = {"name": "shared", "persistentVolumeClaim": {"claimName": "training-data"}}
SHARED_MOUNT = {"name": "shared", "mountPath": POD_SHARED}
# Training needs no root, so the pods run as the PodSecurity "restricted" profile asks: a non-root user
# (the image names none, so the uid is given), the runtime's seccomp profile, no privilege escalation and
# no capabilities. fsGroup: the kubelet gives the shared volume this group, group-writable, so the trainer
# may write the model and checkpoints beside the dataset the Airflow worker wrote. It does so for the
# volume types that let it manage ownership (a local volume; a CSI volume whose driver's fsGroupPolicy
# allows it); on one that does not (NFS, hostPath), make the directories writable for this user yourself.
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
MIN_ACCURACY = 0.80
FEATURES = 8
# What an ingestion DAG updates, and the models the training task writes (each run in its own directory).
TRAINING_DATA = Asset(name="disttrain_training_data", uri=f"file://{POD_SHARED}/incoming")
CANDIDATE_MODEL = Asset(name="disttrain_candidate_model", uri=f"file://{POD_SHARED}/models")


def run_directory(run_id: str) -> str:
    """A directory name for the run (run ids hold ':' and '+')."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


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


@dag(
    dag_id="disttrain_retraining_pipeline",
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable("@weekly", timezone="UTC"), assets=TRAINING_DATA),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=5)},
    tags=["disttrain", "example"],
)
def retraining_pipeline() -> None:
    @task
    def prepare_data(run_id: str | None = None) -> dict[str, str]:
        """This run's dataset: two classes split by a hyperplane through 8 features, 80 % to train on."""
        assert run_id is not None
        name = run_directory(run_id)
        directory = SHARED_STORAGE / "datasets" / name
        directory.mkdir(parents=True, exist_ok=True)
        generator = random.Random(name)
        weights = [generator.uniform(-1, 1) for _ in range(FEATURES)]
        rows = []
        for _ in range(2500):
            features = [round(generator.gauss(0, 1), 5) for _ in range(FEATURES)]
            rows.append([*features, int(sum(w * x for w, x in zip(weights, features, strict=True)) > 0)])
        header = [f"f{i}" for i in range(FEATURES)] + ["label"]
        for file_name, part in (("train.csv", rows[:2000]), ("holdout.csv", rows[2000:])):
            with (directory / file_name).open("w", newline="") as file:
                csv.writer(file).writerows([header, *part])
        print(f"wrote {len(rows)} rows to {directory}")
        return {
            "run": name,
            "train_data": f"{POD_SHARED}/datasets/{name}/train.csv",
            "model_dir": f"{POD_SHARED}/models/{name}",
            "checkpoint_dir": f"{POD_SHARED}/checkpoints/{name}/train",
        }

    dataset = prepare_data()

    train = PyTorchJobOperator(
        task_id="train",
        # The pod templates' security settings; the parameters below fill in the rest of the job.
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
        args=[
            "--data",
            "{{ ti.xcom_pull(task_ids='prepare_data')['train_data'] }}",
            "--epochs",
            "3",
            "--output-dir",
            "{{ ti.xcom_pull(task_ids='prepare_data')['model_dir'] }}",
            "--checkpoint-dir",
            "{{ ti.xcom_pull(task_ids='prepare_data')['checkpoint_dir'] }}",
        ],
        num_workers=2,
        gpus_per_replica=1,
        replica_resources={"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "16Gi"}},
        deferrable=True,
        stream_logs=True,  # the Master's log (one line per epoch) in this task's log while it trains
        execution_timeout=timedelta(hours=6),
        run_policy=RunPolicy(clean_pod_policy="Running"),
        pod_options=PodOptions(shm_size="2Gi", volumes=[SHARED_VOLUME], volume_mounts=[SHARED_MOUNT]),
        wait_policy=WaitPolicy(startup_timeout=timedelta(minutes=30)),
        cleanup_policy=CleanupPolicy(on_finish="succeeded"),
        outlets=[CANDIDATE_MODEL],  # a success emits its event, with the job and its metrics as extra
    )
    dataset >> train

    @task.branch
    def evaluate(result: dict[str, Any], data: dict[str, str]) -> str:
        """Promote when the job succeeded on every replica and the model it wrote is accurate on held-out data."""
        failed_replicas = sum(counts["failed"] for counts in result["replica_statuses"].values())
        print(f"Job {result['name']}: {result['state']} in {result['duration_seconds']}s, {failed_replicas} failed")
        if result["state"] != "succeeded" or failed_replicas:
            return "keep_current_model"
        print(f"the trainer reports {result.get('metrics')}")
        model_file = SHARED_STORAGE / "models" / data["run"] / "model.json"
        try:
            model = json.loads(model_file.read_text())
            with (SHARED_STORAGE / "datasets" / data["run"] / "holdout.csv").open(newline="") as file:
                rows = [[float(cell) for cell in row] for row in list(csv.reader(file))[1:]]
            correct = sum(predict(model, row[:-1]) == int(row[-1]) for row in rows)
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"cannot evaluate {model_file}: {error!r}: keeping the current model")
            return "keep_current_model"
        accuracy = correct / len(rows)
        print(f"held-out accuracy={accuracy:.4f} on {len(rows)} rows (threshold {MIN_ACCURACY})")
        if math.isnan(accuracy) or accuracy < MIN_ACCURACY:
            return "keep_current_model"
        return "promote_model"

    @task
    def promote_model(result: dict[str, Any], data: dict[str, str]) -> str:
        production = SHARED_STORAGE / "production"
        production.mkdir(parents=True, exist_ok=True)
        for name in ("model.pt", "model.json", "metrics.json"):
            shutil.copy2(SHARED_STORAGE / "models" / data["run"] / name, production / f".{name}.tmp")
            os.replace(production / f".{name}.tmp", production / name)
        record = {
            "run": data["run"],
            "job": f"{result['namespace']}/{result['name']}",
            "metrics": result.get("metrics"),
        }
        (production / "PROMOTED.json").write_text(json.dumps(record, indent=2) + "\n")
        print(f"Promoted the model trained by {result['kind']} {record['job']} to {production}")
        return str(production / "model.pt")

    @task
    def keep_current_model() -> None:
        print("Keeping the current production model")

    decision = evaluate(train.output, dataset)
    decision >> [promote_model(train.output, dataset), keep_current_model()]


retraining_pipeline()


@dag(
    dag_id="disttrain_ingest_data",
    schedule=None,  # triggered by whatever lands new data (an upstream system, a sensor, a person)
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["disttrain", "example"],
)
def ingest_data() -> None:
    @task(outlets=[TRAINING_DATA])
    def land_snapshot(run_id: str | None = None) -> str:
        """Record this week's snapshot (here a marker file; in a real pipeline, the export itself)."""
        incoming = SHARED_STORAGE / "incoming"
        incoming.mkdir(parents=True, exist_ok=True)
        (incoming / "LATEST.json").write_text(json.dumps({"ingested_by": run_id}) + "\n")
        return str(incoming)

    land_snapshot()


@dag(
    dag_id="disttrain_deploy_model",
    schedule=CANDIDATE_MODEL,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["disttrain", "example"],
)
def deploy_model() -> None:
    @task
    def deploy_candidate(triggering_asset_events: Any = None) -> dict[str, Any]:
        """Decide from the training task's Asset event alone: which job trained the model, how well, where."""
        # The newest: a run consumes every event since the DAG's previous run, in no set order.
        event = max(triggering_asset_events[CANDIDATE_MODEL], key=lambda event: event.timestamp)
        extra = event.extra
        if "job" not in extra:  # e.g. an event created by hand, through the UI or the REST API
            print(f"the event of {event.source_run_id} names no training job: holding")
            return {"model": None, "accuracy": None, "decision": "hold", "job": None}
        accuracy = extra["metrics"].get("accuracy", 0.0)
        job = extra["job"]
        model_dir = f"{extra['model_uri']}/{run_directory(event.source_run_id)}"
        decision = "deploy" if accuracy >= MIN_ACCURACY else "hold"
        print(f"{job['kind']} {job['namespace']}/{job['name']} trained {model_dir}: accuracy {accuracy} -> {decision}")
        return {"model": model_dir, "accuracy": accuracy, "decision": decision, "job": job["name"]}

    deploy_candidate()


ingest_data()
deploy_model()
