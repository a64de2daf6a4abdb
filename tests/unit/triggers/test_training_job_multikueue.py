"""MultiKueue: the trigger follows a dispatched job's leader log on the worker cluster its Workload names.

Two fake API servers stand for the manager (the job, its Workload with ``status.clusterName``) and the
worker (the job's pods and their logs). The worker is reached through the Airflow connection mapped to
its name, with one shared client however many jobs run there.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, MutableMapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.hooks import watch_registry
from airflow_provider_disttrain.job.outcome import Outcome
from airflow_provider_disttrain.kueue.dispatch import WorkerClusters
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, QUEUE_NAME_LABEL
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.pods.live_logs import LOG_POSITION_ANNOTATION
from airflow_provider_disttrain.pods.snapshot import MAX_MESSAGE_BYTES
from airflow_provider_disttrain.utils import clock
from tests.unit.fakes import (
    OOM_KILLED,
    failed_status,
    make_job,
    make_pod,
    queued_status,
    running_status,
    succeeded_status,
)
from tests.unit.triggers.helpers import make_trigger, started
from tests.unit.waiting import until

pytestmark = pytest.mark.usefixtures("virtual_clock")

NAMESPACE = "ml"
WORKER_CONN_ID = "k8s_worker_1"


@pytest.fixture
def logged() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as events:
        yield events


@pytest.fixture
async def worker(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """The worker cluster's API server, reachable through the Airflow connection ``WORKER_CONN_ID``."""
    from tests.unit.fake_apiserver import FakeApiServer

    server = FakeApiServer(clock.current())
    await server.start()
    extra = {"kube_config": json.dumps(server.kubeconfig())}
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{WORKER_CONN_ID.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )
    yield server
    await server.stop()


def lines(events: list[MutableMapping[str, Any]]) -> list[str]:
    return [str(e["event"]) % tuple(e.get("positional_args", ())) for e in events]


def stamped(text: str) -> str:
    return f"{(datetime.now(timezone.utc) - timedelta(seconds=5)).isoformat().replace('+00:00', 'Z')} {text}"


def queued_job(name: str, uid: str, status: dict[str, Any]) -> dict[str, Any]:
    labels = {TASK_INSTANCE_LABEL: f"key-{name}", QUEUE_NAME_LABEL: "team-a"}
    return make_job(name, NAMESPACE, uid=uid, status=status, labels=labels)


def dispatched_workload(name: str, uid: str, cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"pytorchjob-{name}-1a2b3", "namespace": NAMESPACE, "labels": {JOB_UID_LABEL: uid}},
        "status": {
            "clusterName": cluster,
            "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted"}],
        },
    }


async def dispatch(manager: Any, worker: Any, name: str, uid: str) -> None:
    """A running job on the manager, dispatched to ``worker-1``, whose pods and log are on the worker."""
    await manager.put(queued_job(name, uid, running_status()))
    await manager.put(dispatched_workload(name, uid, "worker-1"), plural="workloads")
    worker.add_pod(make_pod(name, "master", 0, namespace=NAMESPACE))
    await worker.add_log_lines(NAMESPACE, f"{name}-master-0", stamped(f"{name} epoch 1 loss=0.5"))


def workers_mapped() -> dict[str, Any]:
    return WorkerClusters({"worker-1": WORKER_CONN_ID}).to_dict()


async def test_two_jobs_on_one_worker_are_followed_there_with_one_shared_client(
    apiserver: Any, worker: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    await dispatch(apiserver, worker, "train-a", "uid-a")
    await dispatch(apiserver, worker, "train-b", "uid-b")
    triggers = [
        make_trigger(apiserver, name=name, uid=uid, stream_logs=True, worker_clusters=workers_mapped())
        for name, uid in (("train-a", "uid-a"), ("train-b", "uid-b"))
    ]
    tasks = [await started(trigger, apiserver) for trigger in triggers]

    await until(
        lambda: (
            {"[train-a-master-0] train-a epoch 1 loss=0.5", "[train-b-master-0] train-b epoch 1 loss=0.5"}
            <= set(lines(logged))
        )
    )
    # The worker's pods were read on the worker, through one client of its connection for both jobs.
    worker_clients = [
        cluster
        for cluster in watch_registry.registry().clusters.values()
        if cluster.connection.conn_id == WORKER_CONN_ID
    ]
    assert len(worker_clients) == 1
    assert worker_clients[0].generation == 1  # built once, whichever job asked first
    assert len(worker.queries("log")) == 2
    assert apiserver.queries("log") == []  # the manager has no pods of a dispatched job
    assert any("runs on worker cluster 'worker-1' (MultiKueue)" in line for line in lines(logged))

    for name in ("train-a", "train-b"):
        await worker.end_log(NAMESPACE, f"{name}-master-0")
        await apiserver.put({**apiserver.objects[(NAMESPACE, "pytorchjobs", name)], "status": succeeded_status()})
    events = [await task for task in tasks]

    assert [event["status"] for event in events] == ["success", "success"]
    # Where the stream stopped is saved on the manager's job, which every triggerer can read.
    for name in ("train-a", "train-b"):
        annotations = apiserver.objects[(NAMESPACE, "pytorchjobs", name)]["metadata"]["annotations"]
        assert annotations[LOG_POSITION_ANNOTATION].startswith(f"{name}-master-0")
    # The worker's client closes with its last borrower.
    await until(
        lambda: all(c.connection.conn_id != WORKER_CONN_ID for c in watch_registry.registry().clusters.values())
    )


async def test_an_unmapped_worker_cluster_is_named_and_the_job_still_followed(
    apiserver: Any, worker: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    await dispatch(apiserver, worker, "train-a", "uid-a")
    trigger = make_trigger(apiserver, name="train-a", uid="uid-a", stream_logs=True)
    task = await started(trigger, apiserver)

    await until(lambda: any("which no connection maps" in line for line in lines(logged)))
    await apiserver.put(queued_job("train-a", "uid-a", succeeded_status()))
    event = await task

    assert event["status"] == "success"
    note = next(line for line in lines(logged) if "which no connection maps" in line)
    assert "worker cluster 'worker-1'" in note and "worker_clusters={'worker-1':" in note
    assert worker.requests == []  # nothing was asked of a cluster no connection maps


# Kueue deletes the worker's pods as soon as the worker's copy finishes, before the manager's job turns
# terminal: the trigger keeps their last states (``worker_pods``) and its event carries them.

KEPT_METRICS = {"loss": 0.125}


async def test_the_event_carries_the_worker_pods_kueue_deleted_before_the_job_ended(
    apiserver: Any, worker: Any
) -> None:
    await dispatch(apiserver, worker, "train-a", "uid-a")
    task = await started(
        make_trigger(apiserver, name="train-a", uid="uid-a", worker_clusters=workers_mapped()), apiserver
    )
    await until(lambda: worker.open_watches >= 1)  # the worker's pods are watched

    done = {"reason": "Completed", "exitCode": 0, "message": json.dumps(KEPT_METRICS) + " " * 5000}
    await worker.set_pod(make_pod("train-a", "master", 0, namespace=NAMESPACE, phase="Succeeded", terminated=done))
    await worker.set_pod(None, NAMESPACE, "train-a-master-0")  # Kueue deletes the worker's copy
    await apiserver.put({**apiserver.objects[(NAMESPACE, "pytorchjobs", "train-a")], "status": succeeded_status()})
    event = await task

    assert event["status"] == "success"
    (pod,) = Outcome.from_event(json.loads(json.dumps(event))).pods or ()
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert json.loads(terminated["message"]) == KEPT_METRICS  # trimmed to the kubelet's bound, still the metrics
    assert len(terminated["message"].encode()) == MAX_MESSAGE_BYTES
    assert pod["metadata"]["name"] == "train-a-master-0" and "image" not in pod["spec"]["containers"][0]
    await until(lambda: worker.open_watches == 0)  # the watch ended with the trigger


def workload_reads(apiserver: Any) -> int:
    return sum(1 for _, path in apiserver.paths if path.endswith("/workloads"))


async def test_a_job_that_fails_before_the_manager_shows_it_running_is_watched_from_its_dispatch(
    apiserver: Any, worker: Any
) -> None:
    # Seen on the local two-cluster environment: a training that exits at once has failed, and Kueue
    # deleted its pods on the worker, before the manager's job mirrors ``Running``. Its Workload is read
    # from the first look on, again at each change of the job until it names the worker, and the watch
    # starts then.
    await apiserver.put(queued_job("train-a", "uid-a", queued_status()))
    pending = dispatched_workload("train-a", "uid-a", "worker-1")
    del pending["status"]["clusterName"]
    pending["status"]["conditions"] = []  # created, not yet admitted: no worker has it
    await apiserver.put(pending, plural="workloads")
    task = await started(
        make_trigger(apiserver, name="train-a", uid="uid-a", worker_clusters=workers_mapped()), apiserver
    )
    await until(lambda: workload_reads(apiserver) >= 1)
    assert worker.requests == []  # nothing to read there before the dispatch

    # MultiKueue dispatches it: the Workload names the worker, Kueue unsuspends the manager's job (still
    # only ``Created``), and the worker's pods run.
    await apiserver.put(dispatched_workload("train-a", "uid-a", "worker-1"), plural="workloads")
    worker.add_pod(make_pod("train-a", "master", 0, namespace=NAMESPACE))
    await apiserver.put(queued_job("train-a", "uid-a", queued_status()))
    await until(lambda: worker.open_watches >= 1)  # watched though the manager never said "running"
    reads = workload_reads(apiserver)

    failed = make_pod("train-a", "master", 0, namespace=NAMESPACE, phase="Failed", terminated=OOM_KILLED)
    await worker.set_pod(failed)
    await worker.set_pod(None, NAMESPACE, "train-a-master-0")
    await apiserver.put(queued_job("train-a", "uid-a", failed_status()))
    event = await task

    assert event["status"] == "failed"
    (pod,) = Outcome.from_event(json.loads(json.dumps(event))).pods or ()
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled"
    assert workload_reads(apiserver) == reads  # settled: no read of the Workload once it named the worker


async def test_a_job_on_its_own_cluster_keeps_no_pods(apiserver: Any) -> None:
    await apiserver.put(make_job("train-b", NAMESPACE, uid="uid-b", status=running_status()))
    apiserver.add_pod(make_pod("train-b", "master", 0, namespace=NAMESPACE))
    task = await started(make_trigger(apiserver, name="train-b", uid="uid-b"), apiserver)
    await apiserver.put({**apiserver.objects[(NAMESPACE, "pytorchjobs", "train-b")], "status": succeeded_status()})

    event = await task

    assert event["status"] == "success" and "pods" not in event
    assert apiserver.queries("pods") == []
