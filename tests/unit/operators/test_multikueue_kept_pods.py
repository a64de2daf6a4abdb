"""MultiKueue deletes the worker's pods when the worker's copy finishes, before the manager's job turns
terminal (Kueue v0.19 ``multikueue/workload.go``): the task keeps their last states while the job runs
(``pods.snapshot``), so its ending still reads the leader's metrics, the usage and the failure's evidence.

The worker's pods are watched through the real ``kubernetes.watch.Watch`` over a scripted API answer
(``PodWatchApi``); the manager's job turns terminal only once the worker's pods are deleted, as Kueue does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import JobFailedError
from airflow_provider_disttrain.job.outcome import FAILED, SUCCESS, JobRef, make_outcome
from airflow_provider_disttrain.kueue.hold import QUEUE_NAME_LABEL
from tests.unit.fakes import (
    OOM_KILLED,
    FakeTrainingJobHook,
    failed_status,
    make_context,
    make_job,
    make_pod,
    queued_status,
    running_status,
    succeeded_status,
)
from tests.unit.operators.test_multikueue import METRICS, WORKER, dispatched_workload, manager, operator

STARTED = "2024-05-01T10:00:00Z"
FINISHED = "2024-05-01T10:01:40Z"  # 100 s later


def finished_pod(*, succeeded: bool) -> dict[str, Any]:
    """The leader's pod as the worker's last MODIFIED event shows it (terminated, with its start and end)."""
    done = {"reason": "Completed", "exitCode": 0, "message": json.dumps(METRICS)} if succeeded else dict(OOM_KILLED)
    done.update(startedAt=STARTED, finishedAt=FINISHED)
    pod = make_pod("train-abc", "master", 0, phase="Succeeded" if succeeded else "Failed", terminated=done)
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    pod["status"]["startTime"] = STARTED
    return pod


class _Response:
    """What ``kubernetes.watch.Watch`` reads from a watch request: its lines, then the end."""

    def __init__(self, lines: Iterator[bytes]) -> None:
        self.lines = lines

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        return self.lines

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class PodWatchApi:
    """The worker's pods API as a watch sees it: the leader runs, terminates, and is DELETED (by Kueue)."""

    def __init__(self, final: dict[str, Any]) -> None:
        running = make_pod("train-abc", "master", 0)
        self.events = [("ADDED", running), ("MODIFIED", final), ("DELETED", final)]
        self.deleted = threading.Event()  # the watch has delivered the DELETED event
        self.selectors: list[str] = []

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> _Response:
        """:return: V1PodList"""  # (``Watch`` reads the type to build from this docstring)
        self.selectors.append(kwargs["label_selector"])
        return _Response(self._lines())

    def _lines(self) -> Iterator[bytes]:
        if self.deleted.is_set():  # a later watch: nothing more happens on the worker
            time.sleep(0.05)
            return
        for event_type, pod in self.events:
            yield json.dumps({"type": event_type, "object": pod}).encode() + b"\n"
        self.deleted.set()  # (resumed after the last line was applied)


def kueue_like(
    final_status: dict[str, Any], *, succeeded: bool, before: dict[str, Any] | None = None
) -> tuple[FakeTrainingJobHook, PodWatchApi]:
    """The manager, whose job turns terminal only after the worker's pods are gone, and the worker's API;
    ``before``: the job's status until then (running)."""
    api = PodWatchApi(finished_pod(succeeded=succeeded))
    before = running_status() if before is None else before
    hook = manager(before, before, final_status)
    dispatch = hook.on_get

    def on_get(number: int) -> None:
        dispatch(number)
        # The read that returns the job's end (its last status step) comes only after Kueue deleted the
        # worker's pods, as the manager mirrors the end only then: by that time the task must watch them.
        if [len(steps) for steps in hook.steps.values()] == [1]:
            assert api.deleted.wait(10), "the worker's pods were never watched to their end"

    hook.on_get = on_get
    worker = FakeTrainingJobHook()  # its LIST finds no pod: they are deleted
    worker.core_v1_client = api  # type: ignore[attr-defined]
    hook.worker_hooks["k8s_worker_1"] = worker
    return hook, api


def test_sync_a_success_reads_the_metrics_and_usage_of_the_pods_kueue_deleted() -> None:
    hook, api = kueue_like(succeeded_status(), succeeded=True)

    result = operator(hook, worker_clusters={WORKER: "k8s_worker_1"}).execute(make_context())

    assert api.selectors and all(selector.endswith("=train-abc") for selector in api.selectors)
    assert result["cluster"] == WORKER
    assert result["metrics"] == METRICS  # the termination message the DELETED pod carried
    assert result["usage"]["gpus"] == 2 and result["usage"]["gpu_seconds"] == pytest.approx(200)
    json.dumps(result)


def test_sync_a_failure_is_explained_from_the_pods_kueue_deleted() -> None:
    hook, _ = kueue_like(failed_status(), succeeded=False)

    with pytest.raises(JobFailedError) as failed:
        operator(hook, worker_clusters={WORKER: "k8s_worker_1"}).execute(make_context())

    message = str(failed.value)
    assert "OOMKilled" in message
    assert "the pod was deleted with the job's copy on its cluster" in message


def test_sync_a_job_that_fails_before_the_manager_shows_it_running_is_watched_from_its_dispatch() -> None:
    # The manager's job, dispatched, shows only ``Created`` until it mirrors the worker's end: a training
    # that exits at once never looks "running" there. Its pods are watched from the dispatch on.
    hook, api = kueue_like(failed_status(), succeeded=False, before=queued_status())

    with pytest.raises(JobFailedError) as failed:
        operator(hook, worker_clusters={WORKER: "k8s_worker_1"}).execute(make_context())

    assert api.deleted.is_set()
    assert "OOMKilled" in str(failed.value)


def _deferred(status: dict[str, Any], outcome: str, *, succeeded: bool) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """A task resumed after its trigger kept the worker's pods (the event's ``pods``), all gone since."""
    hook = manager(status)
    hook.worker_hooks["k8s_worker_1"] = FakeTrainingJobHook()  # no pods left
    task = operator(hook, worker_clusters={WORKER: "k8s_worker_1"})
    job = hook.add_job(make_job(labels={QUEUE_NAME_LABEL: "team-a"}, status=status))
    hook.workloads.append(dispatched_workload(job))
    event = make_outcome(JobRef("PyTorchJob", "train-abc", "default", job["metadata"]["uid"]), outcome, "done", job)
    event["pods"] = [finished_pod(succeeded=succeeded)]
    return task, job, json.loads(json.dumps(event))  # as Airflow stores it


def test_deferred_a_success_reads_the_pods_the_trigger_kept() -> None:
    task, job, event = _deferred(succeeded_status(), SUCCESS, succeeded=True)

    result = task.execute_complete(make_context(), event, job_uid=job["metadata"]["uid"])

    assert result["metrics"] == METRICS
    assert result["usage"]["gpu_seconds"] == pytest.approx(200)


def test_deferred_a_failure_is_explained_from_the_pods_the_trigger_kept() -> None:
    task, job, event = _deferred(failed_status(), FAILED, succeeded=False)

    with pytest.raises(JobFailedError) as failed:
        task.execute_complete(make_context(), event, job_uid=job["metadata"]["uid"])

    assert "OOMKilled" in str(failed.value)
