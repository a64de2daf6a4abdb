"""DAGs the end-to-end tests trigger through Airflow's REST API (copied into .devairflow/dags/).

Each run's ``conf`` sets how many training jobs start and how long their pods run on the local
(kwok) cluster, through the ``disttrain.test/run-seconds`` pod annotation. Jobs are never deleted on
finish, so a test can count them afterwards; the tests delete them themselves.

The fan-out, the synchronous and the queue-routing DAGs create their jobs suspended
(``runPolicy.suspend``), as a queueing system such as Kueue holds a job until it admits it: their tasks
wait for as long as the test needs, however slowly the machine starts them, and the test then releases
the jobs.

The two colliding DAGs (ids of 74 characters that share their first 63: their jobs' DAG-id labels, cut to
63, are the same) each run one deferred training task on a held job, for the UI's per-DAG access test.

``disttrain_e2e_asset_train`` stands between the retraining example's ingestion and deployment DAGs
(example_dags/retraining_pipeline.py): scheduled on the example's data Asset, it declares the example's
model Asset as its output, trains for seconds on kwok, and reports metrics as the example's trainer does
(its termination message).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Asset, dag, task

from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import CleanupPolicy, PyTorchOptions, WaitPolicy

RUN_SECONDS = "disttrain.test/run-seconds"
EXIT_CODE = "disttrain.test/exit-code"
REASON = "disttrain.test/reason"
TERMINATION_MESSAGE = "disttrain.test/termination-message"
# The retraining example's Assets (same name and URI: the same Assets to Airflow).
TRAINING_DATA = Asset(name="disttrain_training_data", uri="file:///mnt/shared/incoming")
CANDIDATE_MODEL = Asset(name="disttrain_candidate_model", uri="file:///mnt/shared/models")
ASSET_TRAIN_METRICS = '{"accuracy": 0.91, "loss": 0.24}'
COMMON = {
    "image": "busybox:1.36",
    "command": ["python", "train.py"],
    "num_workers": 1,
    "wait_policy": WaitPolicy(poll_interval=2),
    "cleanup_policy": CleanupPolicy(on_finish="never"),
}
START = pendulum.datetime(2026, 1, 1, tz="UTC")
HELD = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"runPolicy": {"suspend": True}}}


@dag(dag_id="disttrain_e2e_fanout", schedule=None, start_date=START, max_active_tasks=1000, tags=["disttrain-e2e"])
def fanout() -> None:
    """``conf["count"]`` deferred training tasks (one mapped task) whose jobs wait suspended until released."""

    @task
    def shards(dag_run=None) -> list[list[str]]:
        return [["--shard", str(index)] for index in range(int(dag_run.conf.get("count", 10)))]

    PyTorchJobOperator.partial(
        task_id="train",
        deferrable=True,
        job_manifest=HELD,
        # One pod per job: 100 jobs fit the local cluster's 220 pod slots next to other tests' pods.
        pytorch_options=PyTorchOptions(with_master=False),
        # The leader's metrics (its termination message): the UI's browser test charts them.
        annotations={RUN_SECONDS: "{{ dag_run.conf.get('run_seconds', 5) }}", TERMINATION_MESSAGE: ASSET_TRAIN_METRICS},
        **COMMON,
    ).expand(args=shards())


@dag(dag_id="disttrain_e2e_long", schedule=None, start_date=START, tags=["disttrain-e2e"])
def long_running() -> None:
    """One deferred training task whose first try's job runs 10 minutes and any later try's 20 s.

    20 s, not less: a deferred task whose job ends within seconds of the deferral can be failed by
    Airflow 3.3's stale-executor-event race (apache/airflow#71580) on a loaded machine."""
    PyTorchJobOperator(
        task_id="train",
        deferrable=True,
        annotations={RUN_SECONDS: "{{ '600' if ti.try_number == 1 else '20' }}"},
        **COMMON,
    )


@dag(
    dag_id="disttrain_e2e_sync",
    schedule=None,
    start_date=START,
    default_args={"retries": 1, "retry_delay": timedelta(seconds=1)},
    tags=["disttrain-e2e"],
)
def synchronous() -> None:
    """One training task waiting in its worker process (not deferred) on a job held suspended."""
    PyTorchJobOperator(
        task_id="train",
        deferrable=False,
        job_manifest=HELD,
        annotations={RUN_SECONDS: "{{ dag_run.conf.get('run_seconds', 5) }}"},
        **COMMON,
    )


@dag(
    dag_id="disttrain_e2e_orphan",
    schedule=None,
    start_date=START,
    default_args={"retries": 0},
    tags=["disttrain-e2e"],
)
def orphan() -> None:
    """Three training tasks whose jobs run 10 minutes: two wait in their worker process (the test
    SIGKILLs the first one's), one waits deferred in the triggerer."""
    long_job = {**COMMON, "annotations": {RUN_SECONDS: "600"}}
    PyTorchJobOperator(task_id="killed", deferrable=False, **long_job)
    PyTorchJobOperator(task_id="waiting", deferrable=False, **long_job)
    PyTorchJobOperator(task_id="deferred", deferrable=True, **long_job)


@dag(dag_id="disttrain_e2e_asset_train", schedule=TRAINING_DATA, start_date=START, tags=["disttrain-e2e"])
def asset_train() -> None:
    """Trains when the example's ingestion DAG updates its data Asset; a success emits the model Asset's
    event (its extra: the job, its metrics, the model's URI) that the example's deployment DAG starts on."""
    PyTorchJobOperator(
        task_id="train",
        deferrable=False,
        inlets=[TRAINING_DATA],
        outlets=[CANDIDATE_MODEL],
        annotations={RUN_SECONDS: "3", TERMINATION_MESSAGE: ASSET_TRAIN_METRICS},
        retries=0,
        **COMMON,
    )


@dag(dag_id="disttrain_e2e_lineage_failure", schedule=None, start_date=START, tags=["disttrain-e2e"])
def lineage_failure() -> None:
    """A training job whose Master is OOMKilled: the job fails (its pods are not restarted), and so does
    the task (no retry)."""
    PyTorchJobOperator(
        task_id="train",
        deferrable=False,
        restart_policy="Never",
        inlets=[TRAINING_DATA],
        outlets=[CANDIDATE_MODEL],
        annotations={RUN_SECONDS: "2", REASON: "OOMKilled", EXIT_CODE: "137"},
        retries=0,
        **COMMON,
    )


@dag(dag_id="disttrain_e2e_queues", schedule=None, start_date=START, tags=["disttrain-e2e"])
def queues() -> None:
    """``conf["count"]`` deferred training tasks on Airflow's default queue and as many on the
    ``training`` queue, their jobs held suspended: with ``[triggerer] queues_enabled`` their triggers
    carry the queue, and only a triggerer started with ``--queues`` naming it runs them."""

    @task
    def shards(dag_run=None) -> list[list[str]]:
        return [["--shard", str(index)] for index in range(int(dag_run.conf.get("count", 2)))]

    shard_args = shards()
    held = {"deferrable": True, "job_manifest": HELD, "pytorch_options": PyTorchOptions(with_master=False), **COMMON}
    PyTorchJobOperator.partial(task_id="train_default_queue", **held).expand(args=shard_args)
    PyTorchJobOperator.partial(task_id="train_training_queue", queue="training", **held).expand(args=shard_args)


# Both ids give the DAG-id label ``COLLIDING_PREFIX`` (tests/e2e/conftest.py COLLIDING_DAG_IDS: the same).
COLLIDING_PREFIX = "disttrain_e2e_colliding_ids_whose_first_63_characters_are_equal"
for team in ("a", "b"):
    with DAG(dag_id=f"{COLLIDING_PREFIX}_for_team_{team}", schedule=None, start_date=START, tags=["disttrain-e2e"]):
        PyTorchJobOperator(
            task_id="train",
            deferrable=True,
            job_manifest=HELD,
            pytorch_options=PyTorchOptions(with_master=False),
            **COMMON,
        )

fanout()
long_running()
synchronous()
orphan()
asset_train()
lineage_failure()
queues()
