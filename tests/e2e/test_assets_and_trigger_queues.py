"""Two Airflow features that need scheduler settings the local deployment leaves off, tested behind one
restart of the scheduler each way (a restart costs about 13 s here; the other e2e tests keep the defaults):

* **Data-aware scheduling.** With ``[scheduler] use_job_schedule`` off (dev/airflow/airflow.cfg.template
  says why) the scheduler creates no runs from schedules, and none for DAGs scheduled on Assets either
  (``_create_dagruns_for_dags`` in airflow/jobs/scheduler_job_runner.py creates both, and only runs with
  it on). The retraining example's ingestion DAG, triggered through the REST API, updates its data Asset;
  ``disttrain_e2e_asset_train`` starts on that event, trains (seconds, on kwok) and emits the example's
  model Asset event; the example's ``disttrain_deploy_model`` starts on it and decides from the event's
  ``extra`` alone. The OpenLineage events the deployment's file transport wrote on the way
  (``[openlineage] transport``) are read back into openlineage-python's classes and checked field by
  field, with those of a training task that fails. While the option is on, every other DAG is paused:
  the examples' @weekly and @hourly schedules (and the retraining pipeline, also scheduled on the data
  Asset) would start runs of their own.
* **Trigger queues.** With ``[triggerer] queues_enabled`` on, a deferred task's trigger carries the
  task's ``queue`` (``_defer_task`` in the task SDK's task_runner.py reads the option in the task process,
  which the scheduler's LocalExecutor forks), and a triggerer started with ``--queues`` runs only
  triggers of those queues (``Trigger.assign_unassigned``/``ids_for_triggerer``); one started without it
  runs only triggers that carry no queue. Two triggerers are started for the test with different
  ``--queues`` (``DEVAIRFLOW_TRIGGERER_QUEUES``, through up.sh and supervise.sh) and stopped after it;
  the deployment's own two, started without --queues, look on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psutil
import pytest
from openlineage.client.event_v2 import RunEvent, RunState

from airflow_provider_disttrain.lineage.facets import FAILURE_FACET, JOB_FACET, METRICS_FACET, PRODUCER
from tests.e2e.airflow_rest import AirflowRest, wait_until
from tests.e2e.conftest import DEVAIRFLOW_DIR, NAMESPACE, REPO, Cluster, Process, deferred_count, since
from tests.openlineage_events import pairs, parse_event

SCRIPTS = REPO / "dev" / "airflow"
INGEST, ASSET_TRAIN, DEPLOY = "disttrain_ingest_data", "disttrain_e2e_asset_train", "disttrain_deploy_model"
FAILURE, QUEUES = "disttrain_e2e_lineage_failure", "disttrain_e2e_queues"
MODULE_DAGS = (INGEST, ASSET_TRAIN, DEPLOY, FAILURE, QUEUES)
# What the scheduler runs with while this module's tests run; each value is the deployment's default
# (DEVAIRFLOW_USE_JOB_SCHEDULE=False, no DEVAIRFLOW_TRIGGERER_QUEUES) when they are done.
WINDOW_SETTINGS = {"DEVAIRFLOW_USE_JOB_SCHEDULE": "True", "DEVAIRFLOW_TRIGGERER_QUEUES": "default training"}
QUEUE_TRIGGERERS = ("triggerer-for-default", "triggerer-for-training")

OPENLINEAGE_FILE = DEVAIRFLOW_DIR / "logs" / "openlineage.jsonl"
OPENLINEAGE_NAMESPACE = "devairflow"  # [openlineage] namespace of the deployment
# The example's Assets, as the OpenLineage naming spec names a file: namespace "file", name the path.
DATA = ("file", "/mnt/shared/incoming")
MODEL = ("file", "/mnt/shared/models")
METRICS = {"accuracy": 0.91, "loss": 0.24}  # the e2e DAG's termination message


# ------------------------------------------------------------------------------------------------ helpers


def deployment_env(**settings: str) -> dict[str, str]:
    """The environment up.sh and config.sh run in: the deployment's triggerers as they are, plus ``settings``."""
    env = {key: value for key, value in os.environ.items() if key not in WINDOW_SETTINGS}
    env["DEVAIRFLOW_TRIGGERERS"] = "2" if (DEVAIRFLOW_DIR / "pids" / "triggerer-2.supervisor.pid").is_file() else "1"
    return {**env, **settings}


def start_script(name: str, **settings: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", str(SCRIPTS / name)],
        env=deployment_env(**settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish_script(script: subprocess.Popen[str]) -> None:
    output, _ = script.communicate(timeout=300)
    assert script.returncode == 0, f"{script.args} failed:\n{output}"


def run_script(name: str, **settings: str) -> None:
    finish_script(start_script(name, **settings))


def alive_jobs(airflow: AirflowRest, job_type: str) -> list[dict[str, Any]]:
    return airflow.call("GET", "/jobs", params={"job_type": job_type, "is_alive": True, "limit": 100})["jobs"]


def wait_for_new_job(airflow: AirflowRest, job_type: str, known: set[int], timeout: float = 120) -> int:
    """Waits until one more job of ``job_type`` than ``known`` heartbeats; returns its id."""

    def new() -> int | None:
        fresh = [job["id"] for job in alive_jobs(airflow, job_type) if job["id"] not in known]
        assert len(fresh) <= 1, f"more than one new {job_type}: {fresh}"
        return fresh[0] if fresh else None

    return wait_until(new, timeout, f"a new {job_type} to heartbeat")


@contextlib.contextmanager
def restarting_scheduler(airflow: AirflowRest) -> Iterator[None]:
    """SIGTERM to the scheduler (its supervisor starts it again, reading airflow.cfg anew); yields (a
    restart takes seconds: do something else meanwhile); returns once the new scheduler heartbeats (the
    health report would still count the old one's last heartbeat)."""
    scheduler = Process("scheduler")
    known = {job["id"] for job in alive_jobs(airflow, "SchedulerJob")}
    stopped = scheduler.restart()
    yield
    scheduler.wait_restarted(stopped)
    wait_for_new_job(airflow, "SchedulerJob", known)


@contextlib.contextmanager
def stop_supervised(names: tuple[str, ...]) -> Iterator[None]:
    """Stops supervised processes as down.sh does (SIGTERM to each supervisor, which stops its process):
    signals them, yields (a graceful stop takes seconds: do something else meanwhile), waits for them."""
    supervisors = []
    for name in names:
        pid_file = DEVAIRFLOW_DIR / "pids" / f"{name}.supervisor.pid"
        if pid_file.is_file() and psutil.pid_exists(pid := int(pid_file.read_text())):
            supervisors.append(psutil.Process(pid))
            os.kill(pid, signal.SIGTERM)
    yield
    psutil.wait_procs(supervisors, timeout=30)
    for name in names:
        for suffix in (".supervisor.pid", ".pid"):
            (DEVAIRFLOW_DIR / "pids" / f"{name}{suffix}").unlink(missing_ok=True)


def dags(airflow: AirflowRest, **params: Any) -> list[dict[str, Any]]:
    return airflow.call("GET", "/dags", params={"limit": 100, **params})["dags"]


def upstream_events(airflow: AirflowRest, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    return airflow.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/upstreamAssetEvents")["asset_events"]


def newest(events: list[dict[str, Any]]) -> dict[str, Any]:
    return max(events, key=lambda event: datetime.fromisoformat(event["timestamp"]))


def wait_for_asset_triggered_run(airflow: AirflowRest, dag_id: str, source_dag_id: str, source_run_id: str) -> str:
    """The run of ``dag_id`` that the scheduler created from an Asset event of ``source_dag_id``'s run."""

    def created() -> str | None:
        listing = airflow.call(
            "GET", f"/dags/{dag_id}/dagRuns", params={"run_type": "asset_triggered", "order_by": "-run_after"}
        )
        for run in listing["dag_runs"][:5]:
            events = upstream_events(airflow, dag_id, run["dag_run_id"])
            if (source_dag_id, source_run_id) in {(e["source_dag_id"], e["source_run_id"]) for e in events}:
                return str(run["dag_run_id"])
        return None

    return wait_until(created, 180, f"an Asset-triggered run of {dag_id} from {source_dag_id}/{source_run_id}")


def run_directory(run_id: str) -> str:
    """example_dags/retraining_pipeline.py's run_directory(): the directory a run's model is written to."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)


class LineageFile:
    """The events the deployment's file transport appends to .devairflow/logs/openlineage.jsonl from now on."""

    def __init__(self) -> None:
        self.offset = OPENLINEAGE_FILE.stat().st_size if OPENLINEAGE_FILE.exists() else 0

    def raw(self) -> list[dict[str, Any]]:
        if not OPENLINEAGE_FILE.exists():
            return []
        with OPENLINEAGE_FILE.open("rb") as file:
            file.seek(self.offset)
            lines = file.read().decode().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def of_run(self, dag_id: str, run_id: str) -> list[tuple[dict[str, Any], RunEvent]]:
        """(raw, parsed) events of one DAG run: the DAG run's own and its tasks', in the order written."""
        found = []
        for raw in self.raw():
            facets = raw["run"]["facets"]
            dag_run = (facets.get("airflow") or facets.get("airflowDagRun") or {}).get("dagRun") or {}
            if (dag_run.get("dag_id"), dag_run.get("run_id")) == (dag_id, run_id):
                found.append((raw, parse_event(json.dumps(raw))))
        return found

    def wait_for(self, dag_id: str, run_id: str, job: str, types: list[RunState]) -> list[tuple[dict, RunEvent]]:
        """Waits until the events of ``job`` in the run are of ``types`` (a task process writes them from a
        forked child, which may finish after the task has reported its state)."""

        def written() -> list[tuple[dict, RunEvent]] | None:
            events = [(raw, event) for raw, event in self.of_run(dag_id, run_id) if event.job.name == job]
            return events if [event.eventType for _, event in events] == types else None

        return wait_until(written, 60, f"the OpenLineage events {[t.value for t in types]} of {job} in {run_id}")


# ------------------------------------------------------------------------------------------------ fixture


class SchedulerOptions:
    """What the module's tests share: the REST API, and the triggerers started for the queues test."""

    def __init__(self, airflow: AirflowRest) -> None:
        self.airflow = airflow
        self.deployment_triggerers = {job["id"] for job in alive_jobs(airflow, "TriggererJob")}
        self.default_triggerer = 0  # the job id of the triggerer started with --queues default
        self.training_triggerer_start: subprocess.Popen[str] | None = None

    def training_triggerer(self) -> int:
        """The job id of the triggerer started with --queues training (once started)."""
        assert self.training_triggerer_start is not None
        finish_script(self.training_triggerer_start)
        return wait_for_new_job(self.airflow, "TriggererJob", self.deployment_triggerers | {self.default_triggerer})


@pytest.fixture(scope="module")
def scheduler_options(e2e_dags: AirflowRest) -> Iterator[SchedulerOptions]:
    """The scheduler restarted with use_job_schedule and queues_enabled on, every other DAG paused, and a
    triggerer for each of the queues ``default`` and ``training`` while the module's tests run; then the
    deployment's defaults again and the DAGs unpaused. The triggerers start one after the other (each
    one's job id is then the one new TriggererJob), the first during the scheduler's restart, the second
    in the background, while the first test runs."""
    airflow = e2e_dags
    for dag_id in MODULE_DAGS:
        wait_until(lambda dag_id=dag_id: airflow.dag_exists(dag_id), 120, f"the dag-processor to parse {dag_id}")
    options = SchedulerOptions(airflow)
    paused: list[str] = []
    reconfigured = False
    started = time.monotonic()
    try:
        for dag in dags(airflow, paused=False):
            if dag["dag_id"] not in MODULE_DAGS:
                airflow.call("PATCH", f"/dags/{dag['dag_id']}", json={"is_paused": True})
                paused.append(dag["dag_id"])
        for dag_id in MODULE_DAGS:
            airflow.unpause(dag_id)
            # Asset events queued for the DAG earlier (e.g. the retraining example's model, by
            # test_retraining_pipeline.py) would start a run as soon as the scheduler creates runs.
            response = airflow.session.delete(f"{airflow.url}/api/v2/dags/{dag_id}/assets/queuedEvents", timeout=30)
            assert response.status_code in {204, 404}, response.text
        reconfigured = True
        run_script("config.sh", **WINDOW_SETTINGS)
        with restarting_scheduler(airflow):
            # up.sh renders the same airflow.cfg and starts what is missing: the default queue's triggerer.
            run_script("up.sh", DEVAIRFLOW_USE_JOB_SCHEDULE="True", DEVAIRFLOW_TRIGGERER_QUEUES="default")
            options.default_triggerer = wait_for_new_job(airflow, "TriggererJob", options.deployment_triggerers)
        options.training_triggerer_start = start_script("up.sh", **WINDOW_SETTINGS)
        print(f"\n[scheduler options] scheduler restarted with them in {since(started)}s")
        yield options
    finally:
        started = time.monotonic()
        if options.training_triggerer_start is not None and options.training_triggerer_start.returncode is None:
            options.training_triggerer_start.communicate(timeout=300)
        if reconfigured:
            with stop_supervised(QUEUE_TRIGGERERS):
                run_script("config.sh")
                with restarting_scheduler(airflow):
                    pass
        for dag_id in paused:
            airflow.unpause(dag_id)
        print(f"\n[scheduler options] defaults restored in {since(started)}s")


# ------------------------------------------------------------------------------------------------ Assets


def check_job_facet(event: RunEvent, namespace: str | None, name: str | None, uid: str | None) -> None:
    job = event.run.facets[JOB_FACET]
    assert job._producer == PRODUCER
    assert (job.kind, job.apiVersion, job.namespace, job.name, job.uid) == (
        "PyTorchJob",
        "kubeflow.org/v1",
        namespace,
        name,
        uid,
    )
    assert (job.replicas, job.gpus, job.images) == ({"Master": 1, "Worker": 1}, 0, ["busybox:1.36"])
    assert (job.localQueue, job.cluster) == (None, {"connection": "kubernetes_default"})


def test_an_ingestion_run_trains_on_its_asset_event_and_the_model_event_starts_the_deployment(
    scheduler_options: SchedulerOptions, runs: list[tuple[str, str]], cluster: Cluster
) -> None:
    airflow = scheduler_options.airflow
    lineage = LineageFile()
    started = time.monotonic()
    ingest_run = airflow.trigger(INGEST, logical_date=None)
    failing_run = airflow.trigger(FAILURE, logical_date=None)
    runs.append((FAILURE, failing_run))

    assert airflow.wait_for_run(INGEST, ingest_run, timeout=180) == "success"
    train_run = wait_for_asset_triggered_run(airflow, ASSET_TRAIN, INGEST, ingest_run)
    runs.append((ASSET_TRAIN, train_run))
    assert airflow.wait_for_run(ASSET_TRAIN, train_run, timeout=240) == "success"
    deploy_run = wait_for_asset_triggered_run(airflow, DEPLOY, ASSET_TRAIN, train_run)
    assert airflow.wait_for_run(DEPLOY, deploy_run, timeout=180) == "success"
    chain_done = since(started)
    assert airflow.wait_for_run(FAILURE, failing_run, timeout=180) == "failed"

    # The training run consumed the ingestion's event, the deployment run the training's: each the newest
    # of the events since the DAG's previous Asset-triggered run (the deployment's may hold older ones of
    # the retraining example's model, from test_retraining_pipeline.py, which it must not decide on).
    data_event = newest(upstream_events(airflow, ASSET_TRAIN, train_run))
    assert (data_event["uri"], data_event["source_dag_id"], data_event["source_run_id"]) == (
        "file:///mnt/shared/incoming",
        INGEST,
        ingest_run,
    )
    [job] = cluster.jobs(ASSET_TRAIN, train_run)
    job_name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    model_event = newest(upstream_events(airflow, DEPLOY, deploy_run))
    assert (model_event["uri"], model_event["source_dag_id"], model_event["source_run_id"]) == (
        "file:///mnt/shared/models",
        ASSET_TRAIN,
        train_run,
    )
    extra = model_event["extra"]
    assert extra["model_uri"] == "file:///mnt/shared/models"
    assert extra["job"] == {"kind": "PyTorchJob", "namespace": NAMESPACE, "name": job_name, "uid": uid}
    assert (extra["state"], extra["metrics"]) == ("succeeded", METRICS)
    assert extra["duration_seconds"] > 0
    # The example's deployment task decided from the event alone.
    decision = airflow.xcom(DEPLOY, deploy_run, "deploy_candidate")
    assert decision == {
        "model": f"file:///mnt/shared/models/{run_directory(train_run)}",
        "accuracy": METRICS["accuracy"],
        "decision": "deploy",
        "job": job_name,
    }

    # OpenLineage, as the deployment's file transport wrote it. The ingestion task's output is the
    # training task's input: one dataset, named alike by Airflow's @task and the provider.
    snapshot = lineage.wait_for(INGEST, ingest_run, f"{INGEST}.land_snapshot", [RunState.START, RunState.COMPLETE])
    assert pairs(snapshot[-1][1].outputs) == [DATA]
    [(start_raw, start), (_, complete)] = lineage.wait_for(
        ASSET_TRAIN, train_run, f"{ASSET_TRAIN}.train", [RunState.START, RunState.COMPLETE]
    )
    for event in (start, complete):
        assert (event.job.namespace, event.job.name) == (OPENLINEAGE_NAMESPACE, f"{ASSET_TRAIN}.train")
        assert (pairs(event.inputs), pairs(event.outputs)) == ([DATA], [MODEL])
    assert start.run.runId == complete.run.runId
    # Before the job is submitted (a synchronous task's START) it has no name (generated), namespace (the
    # connection's) nor uid yet: the facet says what the task knows, without asking anyone.
    check_job_facet(start, None, None, None)
    check_job_facet(complete, NAMESPACE, job_name, uid)
    metrics = complete.run.facets[METRICS_FACET]
    assert (metrics.state, metrics.metrics) == ("succeeded", METRICS) and metrics.durationSeconds > 0
    assert METRICS_FACET not in start.run.facets and FAILURE_FACET not in complete.run.facets
    # The task's run hangs under its DAG run's, whose own events the scheduler wrote.
    [(_, dag_start), _] = lineage.wait_for(ASSET_TRAIN, train_run, ASSET_TRAIN, [RunState.START, RunState.COMPLETE])
    parent = start_raw["run"]["facets"]["parent"]
    assert (parent["job"]["name"], parent["run"]["runId"]) == (ASSET_TRAIN, str(dag_start.run.runId))

    # The failing task: START, then FAIL with the explanation and the failure's class.
    [(_, fail_start), (_, fail)] = lineage.wait_for(
        FAILURE, failing_run, f"{FAILURE}.train", [RunState.START, RunState.FAIL]
    )
    [failed_job] = cluster.jobs(FAILURE, failing_run)
    failed_name = failed_job["metadata"]["name"]
    assert (pairs(fail.inputs), pairs(fail.outputs)) == ([DATA], [MODEL])
    check_job_facet(fail, NAMESPACE, failed_name, failed_job["metadata"]["uid"])
    failure = fail.run.facets[FAILURE_FACET]
    assert failure.reason == "failed"
    assert f"PyTorchJob {NAMESPACE}/{failed_name}" in failure.explanation
    assert "OOMKilled" in failure.explanation
    assert failure.failureClass["class"] == "training"
    assert METRICS_FACET not in fail.run.facets and fail_start.run.runId == fail.run.runId
    print(f"\n[assets] ingestion -> training -> deployment in {chain_done}s (train {job_name})")


# ------------------------------------------------------------------------------------------------ queues


def holders(airflow: AirflowRest, run_id: str, task_id: str) -> dict[int, int | None]:
    """map index -> the triggerer job holding the task instance's trigger (None: not held yet)."""
    return {
        ti["map_index"]: (ti["trigger"] or {}).get("triggerer_id")
        for ti in airflow.task_instances(QUEUES, run_id, task_id)
        if ti["state"] == "deferred"
    }


def test_training_triggers_run_only_on_the_triggerers_serving_their_queue(
    scheduler_options: SchedulerOptions, runs: list[tuple[str, str]], cluster: Cluster
) -> None:
    airflow = scheduler_options.airflow
    count = 2
    default_job, training_job = scheduler_options.default_triggerer, scheduler_options.training_triggerer()
    expected = {"train_default_queue": default_job, "train_training_queue": training_job}
    started = time.monotonic()
    run_id = airflow.trigger(QUEUES, {"count": count})
    runs.append((QUEUES, run_id))

    seen: dict[str, set[int | None]] = {task_id: set() for task_id in expected}

    def routed() -> bool:
        for task_id in expected:
            seen[task_id] |= set(holders(airflow, run_id, task_id).values())
        return all(
            deferred_count(airflow, QUEUES, run_id, task_id) == count
            and set(holders(airflow, run_id, task_id).values()) == {job}
            for task_id, job in expected.items()
        )

    wait_until(routed, 240, "every trigger to run on a triggerer")
    # Every trigger carries its task's queue, and ran nowhere but on its queue's triggerer: never on the
    # deployment's two (started without --queues, they run only triggers without a queue) nor on the other.
    for task_id, queue in (("train_default_queue", "default"), ("train_training_queue", "training")):
        assert {ti["trigger"]["queue"] for ti in airflow.task_instances(QUEUES, run_id, task_id)} == {queue}
        assert seen[task_id] - {None} == {expected[task_id]}, seen

    assert cluster.release_jobs(QUEUES, run_id) == 2 * count
    assert airflow.wait_for_run(QUEUES, run_id, timeout=240) == "success"
    # The task's log names the triggerer job that ran its trigger (the trigger's own log file).
    for task_id, job_id in expected.items():
        for map_index in range(count):
            log = airflow.log(QUEUES, run_id, task_id, try_number=1, map_index=map_index)
            assert f".trigger.{job_id}.log" in log, log[-2000:]
    print(
        f"\n[trigger queues] deployment triggerers {sorted(scheduler_options.deployment_triggerers)} "
        f"(no --queues), --queues default: job {default_job}, --queues training: job {training_job}; "
        f"{2 * count} tasks deferred, routed and done in {since(started)}s"
    )
