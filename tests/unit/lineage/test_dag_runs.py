"""OpenLineage events and Asset events of whole DAG runs (``dag.test()``), the cluster faked at the hook.

The openlineage provider's own listener runs as in production (its file transport writes one JSON
event per line); the events are read back into openlineage-python's classes and checked field by
field: the job, the datasets named per the OpenLineage naming spec, the provider's run facets.
The listener emits from a thread rather than a forked child (``[openlineage] execute_in_thread``):
the events are the same, and a test process is not forked.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from openlineage.client.event_v2 import RunEvent, RunState
from openlineage.client.serde import Serde

from airflow_provider_disttrain.hooks import watch_registry
from airflow_provider_disttrain.lineage.facets import FAILURE_FACET, JOB_FACET, METRICS_FACET, PRODUCER
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from tests.openlineage_events import pairs, parse_event
from tests.unit.fakes import FakeTrainingJobHook, InMemoryWatches, failed_status, running_status, succeeded_status
from tests.unit.operators.test_ending import finished_pods
from tests.unit.operators.test_training_job import add_failing_pods

JOB_NAME = "train-abc"  # the name the fake pods (finished_pods, add_failing_pods) belong to

DAG_FILE = """\
import pendulum
from airflow.sdk import DAG, Asset

from airflow_provider_disttrain import PyTorchJobOperator, WaitPolicy

with DAG(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False):
    PyTorchJobOperator(
        task_id="train",
        job_name="{job_name}",
        image="trainer:2",
        command=["torchrun", "train.py"],
        num_workers=2,
        gpus_per_replica=1,
        local_queue="team-a",
        inlets=[Asset(name="weekly-data", uri="s3://example-bucket/datasets/weekly")],
        outlets=[Asset(name="retrained-model", uri="file:///mnt/shared/models/latest")],
        wait_policy=WaitPolicy(poll_interval=0.01),
        deferrable={deferrable},
        retries=0,
    )
"""


@pytest.fixture
def lineage_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], list[RunEvent]]]:
    """The openlineage provider's listener, writing to a file: what the tests read back as events."""
    from airflow.providers.openlineage import conf
    from airflow.providers.openlineage.plugins.listener import OpenLineageListener
    from airflow.sdk.listener import get_listener_manager

    # Load the plugins first, with OpenLineage off: the provider's plugin then registers no listener of
    # its own (it decides when imported), and this fixture's listener is the only one.
    manager = get_listener_manager()
    log = tmp_path / "openlineage.jsonl"
    monkeypatch.setenv(
        "AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "file", "log_file_path": str(log), "append": True})
    )
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__EXECUTE_IN_THREAD", "true")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "disttrain-tests")

    def clear_config() -> None:
        # The provider reads its configuration once (functools.cache): read it again with the above.
        for value in vars(conf).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()

    clear_config()
    listener = OpenLineageListener()
    manager.add_listener(listener)

    def read() -> list[RunEvent]:
        lines = log.read_text().splitlines() if log.exists() else []
        return [parse_event(line) for line in lines if json.loads(line)["job"]["name"].endswith(".train")]

    yield read
    manager.pm.unregister(listener)
    monkeypatch.undo()
    clear_config()


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeTrainingJobHook]:
    def make(*statuses: dict[str, Any]) -> FakeTrainingJobHook:
        fake = FakeTrainingJobHook(progression=statuses)
        monkeypatch.setattr(TrainingJobOperator, "hook", property(lambda self: fake))
        monkeypatch.setattr(watch_registry, "subscribe", InMemoryWatches(fake).subscribe)
        return fake

    return make


@pytest.fixture
def run_dag(airflow_db: Path) -> Iterator[Callable[..., Any]]:
    written: list[Path] = []

    def run(dag_id: str, *, deferrable: bool) -> Any:
        from airflow.dag_processing.dagbag import DagBag

        path = airflow_db / f"{dag_id}.py"
        path.write_text(DAG_FILE.format(dag_id=dag_id, job_name=JOB_NAME, deferrable=deferrable))
        written.append(path)
        bag = DagBag(dag_folder=str(path))
        assert bag.import_errors == {}
        return bag.dags[dag_id].test()

    yield run
    for path in written:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def asset_events(dag_id: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetModel.uri, AssetEvent.extra)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetEvent.source_dag_id == dag_id)
        )
        return [{"uri": uri, "extra": extra} for uri, extra in rows]


def check_start(event: RunEvent, dag_id: str) -> None:
    assert event.eventType == RunState.START
    assert (event.job.namespace, event.job.name) == ("disttrain-tests", f"{dag_id}.train")
    assert pairs(event.inputs) == [("s3://example-bucket", "datasets/weekly")]
    assert pairs(event.outputs) == [("file", "/mnt/shared/models/latest")]
    job = event.run.facets[JOB_FACET]
    assert job._producer == PRODUCER
    assert (job.kind, job.apiVersion, job.name, job.uid) == ("PyTorchJob", "kubeflow.org/v1", JOB_NAME, None)
    assert (job.replicas, job.gpus, job.images, job.localQueue) == (
        {"Master": 1, "Worker": 2},
        3,
        ["trainer:2"],
        "team-a",
    )
    assert job.cluster == {"connection": "kubernetes_default"}


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_a_training_run_emits_start_and_complete_with_its_job_datasets_and_metrics(
    deferrable: bool, lineage_events: Callable[[], list[RunEvent]], cluster: Any, run_dag: Any
) -> None:
    fake = cluster(running_status(workers=2), succeeded_status(workers=2))
    fake.pods[JOB_NAME] = finished_pods('{"accuracy": 0.93, "loss": 0.2}')
    dag_id = f"disttrain_lineage_{'deferred' if deferrable else 'sync'}"

    dag_run = run_dag(dag_id, deferrable=deferrable)

    assert str(dag_run.state) == "success"
    events = lineage_events()
    # A task resumed from its trigger starts again (Airflow's listener calls it running again).
    starts = [RunState.START, RunState.START] if deferrable else [RunState.START]
    assert [event.eventType for event in events] == [*starts, RunState.COMPLETE]
    for start in events[:-1]:
        check_start(start, dag_id)
    complete = events[-1]
    assert {event.run.runId for event in events} == {complete.run.runId}
    uid = fake.only_job()["metadata"]["uid"]
    assert pairs(complete.inputs) == [("s3://example-bucket", "datasets/weekly")]
    assert pairs(complete.outputs) == [("file", "/mnt/shared/models/latest")]
    job = complete.run.facets[JOB_FACET]
    assert (job.namespace, job.name, job.uid, job.gpus) == ("default", JOB_NAME, uid, 3)
    metrics = complete.run.facets[METRICS_FACET]
    assert (metrics.state, metrics.metrics) == ("succeeded", {"accuracy": 0.93, "loss": 0.2})
    assert FAILURE_FACET not in complete.run.facets
    # The model's Asset event carries the job, its metrics and the model's URI.
    [event] = asset_events(dag_id)
    assert event["uri"] == "file:///mnt/shared/models/latest"
    assert event["extra"]["model_uri"] == "file:///mnt/shared/models/latest"
    assert event["extra"]["job"] == {"kind": "PyTorchJob", "namespace": "default", "name": JOB_NAME, "uid": uid}
    assert event["extra"]["metrics"] == {"accuracy": 0.93, "loss": 0.2}
    assert event["extra"]["state"] == "succeeded"


def test_a_failed_training_run_emits_fail_with_the_explanation(
    lineage_events: Callable[[], list[RunEvent]], cluster: Any, run_dag: Any
) -> None:
    fake = cluster(running_status(workers=2), failed_status())
    add_failing_pods(fake, JOB_NAME)
    dag_id = "disttrain_lineage_failed"

    dag_run = run_dag(dag_id, deferrable=False)

    assert str(dag_run.state) == "failed"
    events = lineage_events()
    assert [event.eventType for event in events] == [RunState.START, RunState.FAIL]
    check_start(events[0], dag_id)
    fail = events[-1]
    failure = fail.run.facets[FAILURE_FACET]
    assert failure.reason == "failed"
    assert f"PyTorchJob default/{JOB_NAME}" in failure.explanation
    assert "OOMKilled" in failure.explanation
    assert "CUDA out of memory? no: host memory" in failure.explanation  # the master's last log lines
    # The failure class the provider gave the error (failure_class.py): the training's own, for OOMKilled.
    assert failure.failureClass["class"] == "training"
    assert fail.run.facets[JOB_FACET].uid == fake.only_job()["metadata"]["uid"]
    assert METRICS_FACET not in fail.run.facets
    assert asset_events(dag_id) == []  # a failed task emits no Asset event
    # Read back, the event serializes as it was written (nothing was lost in parsing).
    assert Serde.to_dict(fail.run.facets[FAILURE_FACET])["explanation"] == failure.explanation
