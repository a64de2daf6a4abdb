"""``TrainingJobTrigger`` and a job Kueue can never admit: the Workload it follows through the shared watch
says so (captured from the real Kueue v0.19.2), and the trigger fires ``inadmissible`` at once, long
before the queue deadline; a Workload that waits for quota keeps it waiting."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, QUEUE_NAME_LABEL
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from tests.unit.fakes import START, condition, epoch, make_job, succeeded_status
from tests.unit.kueue.test_admission import V019, load
from tests.unit.triggers.helpers import make_trigger, run_once, started

pytestmark = pytest.mark.usefixtures("virtual_clock")

HELD = {"conditions": [condition("Created", START), condition("Suspended", START, "PyTorchJobSuspended")]}


def queued_job(status: dict[str, Any]) -> dict[str, Any]:
    labels = {TASK_INSTANCE_LABEL: "abc123", QUEUE_NAME_LABEL: "user-queue"}
    return make_job("train-abc", "ml", uid="uid-1", status=status, labels=labels, created=START)


def captured(situation: str) -> dict[str, Any]:
    workload = copy.deepcopy(load(V019, situation))
    workload["metadata"].update(namespace="ml", labels={JOB_UID_LABEL: "uid-1"})
    for key in ("resourceVersion", "uid", "ownerReferences"):
        workload["metadata"].pop(key, None)
    return workload


@pytest.mark.parametrize(
    ("situation", "reason"),
    [
        ("exceeds-max-quota", "ExceedsMaxQuota"),
        ("no-matching-flavor", "NoMatchingFlavor"),
        ("local-queue-missing", "Misconfigured"),
    ],
)
async def test_kueues_final_word_fires_inadmissible_at_once(apiserver: Any, situation: str, reason: str) -> None:
    await apiserver.put(queued_job(HELD))
    await apiserver.put(captured(situation), plural="workloads")

    event = await run_once(make_trigger(apiserver, queue_deadline=epoch(3600)))

    assert event["status"] == "inadmissible"
    assert event["message"].startswith(
        f"PyTorchJob ml/train-abc was not admitted: Kueue can never admit it ({reason}: "
    )
    assert event["job"]["name"] == "train-abc"


async def test_waiting_for_quota_keeps_the_trigger_waiting(apiserver: Any) -> None:
    await apiserver.put(queued_job(HELD))
    await apiserver.put(captured("waiting-for-quota"), plural="workloads")
    task = await started(make_trigger(apiserver, queue_deadline=epoch(3600)), apiserver, watches=2)

    await apiserver.put(queued_job(succeeded_status()))

    assert (await task)["status"] == "success"


def replacement(situation: str, name: str, uid: str, created: str) -> dict[str, Any]:
    """One of the Workloads Kueue made for the job (it replaces a job's Workload when it must: a new name
    and uid, the same job-uid label, the predecessor deleted before or after)."""
    workload = captured(situation)
    workload["metadata"].update(name=name, uid=uid, creationTimestamp=created)
    return workload


async def test_the_verdict_of_a_replacement_workload_survives_the_predecessors_deletion(apiserver: Any) -> None:
    await apiserver.put(queued_job(HELD))
    await apiserver.put(
        replacement("waiting-for-quota", "pytorchjob-train-abc-1", "wl-uid-1", START), plural="workloads"
    )
    task = await started(make_trigger(apiserver, queue_deadline=epoch(3600)), apiserver, watches=2)

    # Kueue makes the successor first, then the predecessor's deletion arrives.
    await apiserver.put(
        replacement("exceeds-max-quota", "pytorchjob-train-abc-2", "wl-uid-2", "2030-01-01T00:00:00Z"),
        plural="workloads",
    )
    await apiserver.remove("ml", "pytorchjob-train-abc-1", plural="workloads")

    event = await task
    assert event["status"] == "inadmissible"
    assert "ExceedsMaxQuota" in event["message"]


async def test_a_listed_workload_being_deleted_does_not_hide_its_successor(apiserver: Any) -> None:
    await apiserver.put(queued_job(HELD))
    successor = replacement("no-matching-flavor", "pytorchjob-train-abc-2", "wl-uid-2", "2030-01-01T00:00:00Z")
    await apiserver.put(successor, plural="workloads")
    going = replacement("waiting-for-quota", "pytorchjob-train-abc-3", "wl-uid-1", START)
    going["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:01Z"  # held by a finalizer, listed after
    await apiserver.put(going, plural="workloads")

    event = await run_once(make_trigger(apiserver, queue_deadline=epoch(3600)))

    assert event["status"] == "inadmissible"
    assert "NoMatchingFlavor" in event["message"]
