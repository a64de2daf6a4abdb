"""``TrainingJobTrigger`` and Kueue: it follows the Workload of a job Kueue holds through the shared watch.

Real trigger, shared watch and kubernetes_asyncio client against the fake API server, which serves the
Workloads (``kueue.x-k8s.io/v1beta2``) beside the jobs, as Kueue v0.17 writes them.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.hooks import watch_registry
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, QUEUE_NAME_LABEL
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
from tests.unit.fakes import START, condition, epoch, make_job, running_status, succeeded_status
from tests.unit.triggers.helpers import make_trigger, run_once, started
from tests.unit.waiting import until

WORKLOADS = "workloads"
QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu in flavor "
    "gpu-flavor, 8 more needed"
)

# Trigger and watch stories run on virtual time (tests/unit/conftest.py: virtual_clock).
pytestmark = pytest.mark.usefixtures("virtual_clock")


def queued_job(status: dict[str, Any], *, queue: str | None = "default") -> dict[str, Any]:
    labels = {TASK_INSTANCE_LABEL: "abc123", **({QUEUE_NAME_LABEL: queue} if queue else {})}
    return make_job("train-abc", "ml", uid="uid-1", status=status, labels=labels, created=START)


HELD = {"conditions": [condition("Created", START), condition("Suspended", START, "PyTorchJobSuspended")]}


def workload(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "pytorchjob-train-abc-5d7e2", "namespace": "ml", "labels": {JOB_UID_LABEL: "uid-1"}},
        "status": {"conditions": list(conditions)},
    }


PENDING = workload(condition("QuotaReserved", START, "Pending", QUOTA_MESSAGE, status="False"))
ADMITTED = workload(condition("QuotaReserved", START, "QuotaReserved"), condition("Admitted", START, "Admitted"))


def workload_requests(apiserver: Any) -> list[str]:
    return [verb for verb, path in apiserver.paths if path.endswith(f"/{WORKLOADS}")]


async def test_the_workloads_reason_is_in_the_progress_lines_until_admission(apiserver: Any) -> None:
    await apiserver.put(queued_job(HELD))
    await apiserver.put(PENDING, plural=WORKLOADS)
    with structlog.testing.capture_logs() as logs:
        task = await started(make_trigger(apiserver), apiserver, watches=2)  # the job's and the Workloads'
        await until(lambda: any(QUOTA_MESSAGE in str(entry["event"]) for entry in logs))

        await apiserver.put(ADMITTED, plural=WORKLOADS)
        await apiserver.put(queued_job(running_status()))
        await until(lambda: apiserver.open_watches == 1)  # admitted: the Workload watch is let go
        await apiserver.put(queued_job(succeeded_status()))
        event = await task

    assert event["status"] == "success"
    lines = [str(entry["event"]) for entry in logs]
    queued = next(line for line in lines if QUOTA_MESSAGE in line)
    assert "queued by Kueue in LocalQueue 'default'" in queued
    assert queued.endswith(f"waiting: {QUOTA_MESSAGE}")
    # One LIST and one WATCH of the namespace's Workloads, selected by Kueue's job-uid label.
    assert workload_requests(apiserver) == ["list", "watch"]
    assert {query.get("labelSelector") for query in apiserver.queries("list")} == {TASK_INSTANCE_LABEL, JOB_UID_LABEL}


async def test_queue_deadline_ends_the_wait_with_kueues_message(apiserver: Any) -> None:
    await apiserver.put(queued_job(HELD))
    await apiserver.put(PENDING, plural=WORKLOADS)

    event = await run_once(make_trigger(apiserver, queue_deadline=epoch(0.5), startup_deadline=epoch(-60)))

    assert event["status"] == "timeout"
    assert "was not admitted by Kueue within queue_timeout" in event["message"]
    assert event["message"].endswith(f"Kueue: {QUOTA_MESSAGE}")


async def test_triggers_of_one_namespace_share_one_workload_watch(apiserver: Any) -> None:
    names = [f"train-{index}" for index in range(3)]
    for index, name in enumerate(names):
        held = queued_job(HELD)
        held["metadata"].update(name=name, uid=f"uid-{index}")
        pending = workload(condition("QuotaReserved", START, "Pending", f"{QUOTA_MESSAGE} ({name})", status="False"))
        pending["metadata"].update(name=f"wl-{name}", labels={JOB_UID_LABEL: f"uid-{index}"})
        await apiserver.put(held)
        await apiserver.put(pending, plural=WORKLOADS)
    triggers = [
        make_trigger(apiserver, name=name, uid=f"uid-{i}", queue_deadline=epoch(1.0)) for i, name in enumerate(names)
    ]

    events = await asyncio.gather(*(run_once(trigger) for trigger in triggers))

    for name, event in zip(names, events, strict=True):
        assert event["status"] == "timeout"
        assert event["message"].endswith(f"({name})")  # each its own Workload's reason
    assert workload_requests(apiserver) == ["list", "watch"]


async def test_a_job_without_a_queue_makes_no_workload_request(apiserver: Any) -> None:
    await apiserver.put(queued_job(HELD, queue=None))
    task = await started(make_trigger(apiserver), apiserver)

    await apiserver.put(queued_job(succeeded_status(), queue=None))

    assert (await task)["status"] == "success"
    assert workload_requests(apiserver) == []


async def test_unreadable_workloads_are_reported_once_and_the_job_is_still_followed(apiserver: Any) -> None:
    await apiserver.put(queued_job({"conditions": [condition("Created", START)]}))
    with structlog.testing.capture_logs() as logs:
        task = await started(make_trigger(apiserver), apiserver)
        apiserver.fail_next("list", 403, reason="Forbidden")  # the next LIST is the Workloads': a Role without them
        await apiserver.put(queued_job(HELD))
        await until(lambda: any("cannot be read" in str(entry["event"]) for entry in logs))
        await apiserver.put(queued_job(running_status()))
        await apiserver.put(queued_job(succeeded_status()))
        event = await task

    assert event["status"] == "success"
    warnings = [entry for entry in logs if "cannot be read" in str(entry["event"])]
    assert len(warnings) == 1
    assert "workloads.kueue.x-k8s.io" in str(warnings[0]["event"])


def test_a_trigger_serialized_before_queue_deadline_existed_still_loads() -> None:
    _, kwargs = TrainingJobTrigger(kind="PyTorchJob", name="a", namespace="b", queue_deadline=5.0).serialize()
    assert kwargs["deadlines"]["queue"] == kwargs["queue_deadline"] == 5.0
    del kwargs["deadlines"]["queue"], kwargs["queue_deadline"]

    assert TrainingJobTrigger(**kwargs).deadlines.queue is None


async def test_no_workload_watch_lingers_after_the_trigger_ends(apiserver: Any) -> None:
    await apiserver.put(queued_job(HELD))
    await apiserver.put(PENDING, plural=WORKLOADS)

    await run_once(make_trigger(apiserver, queue_deadline=epoch(0.3)))

    await until(lambda: not watch_registry.registry().watches)


async def test_waiting_triggers_say_their_place_in_the_queue_from_one_request_per_interval(apiserver: Any) -> None:
    """Kueue's visibility API (served by the fake from its Workloads, oldest first): each job's position
    is in its progress lines, and the three triggers of the LocalQueue share one request per 30 s."""
    names = [f"train-{index}" for index in range(3)]
    for index, name in enumerate(names):
        held = queued_job(HELD)
        held["metadata"].update(name=name, uid=f"uid-{index}")
        pending = workload(condition("QuotaReserved", START, "Pending", QUOTA_MESSAGE, status="False"))
        pending["metadata"].update(
            name=f"wl-{name}", labels={JOB_UID_LABEL: f"uid-{index}"}, creationTimestamp=f"2024-05-01T10:00:0{index}Z"
        )
        pending["spec"] = {"queueName": "default"}
        await apiserver.put(held)
        await apiserver.put(pending, plural=WORKLOADS)
    triggers = [make_trigger(apiserver, name=name, uid=f"uid-{i}") for i, name in enumerate(names)]

    with structlog.testing.capture_logs() as logs:
        tasks = [asyncio.create_task(run_once(trigger)) for trigger in triggers]
        await until(lambda: sum("position " in str(entry["event"]) for entry in logs) >= 3)
        # The first is admitted: at the next refresh the others move up.
        first = workload(condition("QuotaReserved", START, "QuotaReserved"), condition("Admitted", START, "Admitted"))
        first["metadata"].update(name="wl-train-0", labels={JOB_UID_LABEL: "uid-0"})
        first["spec"] = {"queueName": "default"}
        await apiserver.put(first, plural=WORKLOADS)
        await until(lambda: any("position 1 of 2" in str(entry["event"]) for entry in logs), within=120)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    lines = [str(entry["event"]) for entry in logs]
    said = {
        name: [line for line in lines if line.startswith(f"PyTorchJob ml/{name}") and "position" in line]
        for name in names
    }
    assert any(
        "position 3 of 3 in LocalQueue 'default' (3 in its ClusterQueue); queued since 2024-05-01 10:00:02 UTC" in line
        for line in said["train-2"]
    )
    assert any("position 2 of 2" in line for line in said["train-2"])  # moved up, and said so
    assert any("position 1 of 2" in line for line in said["train-1"])
    # One request for the three at the start, one at the 30 s refresh (not one per trigger).
    asked = [path for verb, path in apiserver.paths if path.endswith("/pendingworkloads")]
    assert len(asked) == 2


def admitted_elsewhere(index: int, seconds_ago: float) -> dict[str, Any]:
    """Another job's Workload, admitted ``seconds_ago`` through LocalQueue default's ClusterQueue gpu-a."""
    at = datetime.fromtimestamp(epoch(-seconds_ago), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    admitted = workload(condition("QuotaReserved", at, "QuotaReserved"), condition("Admitted", at, "Admitted"))
    admitted["metadata"].update(
        name=f"wl-other-{index}", uid=f"wl-uid-{index}", labels={JOB_UID_LABEL: f"other-{index}"}
    )
    admitted["spec"] = {"queueName": "default"}
    admitted["status"]["admission"] = {"clusterQueue": "gpu-a"}
    return admitted


async def test_the_progress_line_estimates_the_start_from_the_admissions_the_shared_watch_saw(apiserver: Any) -> None:
    """The Workload watch notes every admission of the namespace it lists or is told of (no request of its
    own): three in the last 30 min put the next job about 10 min away; a fourth, 7.5 min."""
    for index in range(3):
        await apiserver.put(admitted_elsewhere(index, 300 + 600 * index), plural=WORKLOADS)
    mine = workload(condition("QuotaReserved", START, "Pending", QUOTA_MESSAGE, status="False"))
    mine["spec"] = {"queueName": "default"}
    await apiserver.put(queued_job(HELD))
    await apiserver.put(mine, plural=WORKLOADS)

    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(run_once(make_trigger(apiserver)))
        await until(lambda: any("estimated start" in str(entry["event"]) for entry in logs))
        await apiserver.put(admitted_elsewhere(3, 60), plural=WORKLOADS)  # a watch event nobody waits for
        moved = workload(condition("QuotaReserved", START, "Pending", f"{QUOTA_MESSAGE} (again)", status="False"))
        moved["spec"] = {"queueName": "default"}
        await apiserver.put(moved, plural=WORKLOADS)  # wakes the trigger
        await until(lambda: any("4 admissions" in str(entry["event"]) for entry in logs))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    lines = [str(entry["event"]) for entry in logs if "estimated start" in str(entry["event"])]
    assert lines[0].endswith(
        "(1 in its ClusterQueue); estimated start: position 1 in ClusterQueue gpu-a; 3 admissions there in the "
        "last 30 min, about one every 10 min: about 10 min"
    )
    assert lines[-1].endswith("4 admissions there in the last 30 min, about one every 8 min: about 8 min")
    assert workload_requests(apiserver) == ["list", "watch"]
