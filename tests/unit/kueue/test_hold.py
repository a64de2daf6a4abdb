"""``kueue``: Kueue's hold on a job and its Workload's reason, from objects shaped as Kueue v0.17 writes them."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kube.conditions import parse_time
from airflow_provider_disttrain.kueue.hold import (
    JOB_UID_LABEL,
    QUEUE_NAME_LABEL,
    admitted_at,
    held_by_kueue,
    queue_name_problem,
    startup_clock_shift,
    validate_queue_name,
    waiting_message,
    workload_of,
)
from tests.unit.fakes import condition, make_job

CREATED = "2026-11-30T10:00:00Z"
RESUMED = "2026-11-30T10:07:30Z"
QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu in flavor "
    "gpu-flavor, 8 more needed"
)


def queued_job(*conditions: dict[str, Any], queue: str | None = "default") -> dict[str, Any]:
    labels = {QUEUE_NAME_LABEL: queue} if queue else {}
    return make_job(labels=labels, created=CREATED, status={"conditions": list(conditions)})


def held() -> dict[str, Any]:
    """A PyTorchJob as the training-operator leaves it while Kueue keeps it suspended (never ran: no Running)."""
    return queued_job(
        condition("Created", CREATED),
        condition("Suspended", CREATED, reason="PyTorchJobSuspended", message="PyTorchJob train-abc is suspended."),
    )


def released() -> dict[str, Any]:
    """The same job once Kueue admitted and unsuspended it (the operator's Resumed transition)."""
    return queued_job(
        condition("Created", CREATED),
        condition("Suspended", RESUMED, reason="PyTorchJobResumed", status="False"),
    )


def workload(*conditions: dict[str, Any], uid: str = "uid-1", **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"pytorchjob-train-abc-{uid[-5:]}",
            "namespace": "default",
            "labels": {JOB_UID_LABEL: uid},
            "creationTimestamp": CREATED,
            **metadata,
        },
        "status": {"conditions": list(conditions)},
    }


# -- the queue name -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["default", "team-a", "gpu.large", "a" * 63])
def test_a_valid_local_queue_name_passes(name: str) -> None:
    assert queue_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "Default", "team_a", "-a", "a-", "a" * 64, "a/b", 3, None])
def test_an_invalid_queue_name_is_refused_naming_the_field(name: Any) -> None:
    with pytest.raises(InvalidJobSpecError) as raised:
        validate_queue_name(name, "queue")
    assert raised.value.field == "queue"
    assert repr(name) in str(raised.value)


# -- the job: held, released, and the startup clock -----------------------------------------------------------


def test_a_suspended_job_with_the_queue_label_is_held_by_kueue() -> None:
    assert held_by_kueue(held())
    assert JobView.of(held()).state is JobState.SUSPENDED
    assert startup_clock_shift(held()) is None


def test_a_suspended_job_without_the_queue_label_is_not_kueues() -> None:
    job = held()
    del job["metadata"]["labels"][QUEUE_NAME_LABEL]
    assert not held_by_kueue(job)
    assert startup_clock_shift(job) == 0.0


def test_a_labelled_job_kueue_never_suspended_starts_its_clock_at_creation() -> None:
    # A cluster without Kueue: the label is there, the job was never suspended.
    job = queued_job(condition("Created", CREATED))
    assert not held_by_kueue(job)
    assert admitted_at(job) is None
    assert startup_clock_shift(job) == 0.0


def test_a_released_job_starts_its_clock_at_its_resumed_transition() -> None:
    job = released()
    assert not held_by_kueue(job)
    assert admitted_at(job) == parse_time(RESUMED).timestamp()  # type: ignore[union-attr]
    assert startup_clock_shift(job) == 450.0  # 7 min 30 s in the queue


def test_describe_state_says_queued_by_kueue_rather_than_suspended() -> None:
    text = JobView.of(held()).describe()
    assert text.startswith("queued by Kueue in LocalQueue 'default'")
    assert "PyTorchJobSuspended" in text
    unqueued = held()
    del unqueued["metadata"]["labels"][QUEUE_NAME_LABEL]
    assert JobView.of(unqueued).describe().startswith("suspended (Suspended")


# -- the Workload ----------------------------------------------------------------------------------------


def test_the_quota_reserved_message_is_why_it_waits() -> None:
    pending = workload(condition("QuotaReserved", CREATED, reason="Pending", message=QUOTA_MESSAGE, status="False"))
    assert waiting_message(pending) == QUOTA_MESSAGE


def test_an_admitted_workload_has_no_waiting_message() -> None:
    admitted = workload(
        condition("QuotaReserved", RESUMED, reason="QuotaReserved"),
        condition("Admitted", RESUMED, reason="Admitted"),
    )
    assert waiting_message(admitted) is None


def test_quota_reserved_but_not_admitted_waits_for_admission_checks() -> None:
    reserved = workload(
        condition("QuotaReserved", RESUMED, reason="QuotaReserved"),
        condition("Admitted", RESUMED, reason="NoChecks", message="The workload has pending checks", status="False"),
    )
    reserved["status"]["admission"] = {"clusterQueue": "gpu-cluster-queue"}
    assert (
        waiting_message(reserved) == "quota reserved in ClusterQueue gpu-cluster-queue; The workload has pending checks"
    )


def test_an_evicted_workload_says_why_and_who_preempted_it() -> None:
    # Kueue v0.17's message (pkg/scheduler/preemption/preemption.go, preemptionMessage).
    message = (
        "Preempted to accommodate a workload (UID: 5b0c, JobUID: 9d1e) due to prioritization in the ClusterQueue; "
        "preemptor path: /gpu-cluster-queue; preemptee path: /gpu-cluster-queue"
    )
    evicted = workload(
        condition("QuotaReserved", RESUMED, reason="Pending", message=QUOTA_MESSAGE, status="False"),
        condition("Evicted", RESUMED, reason="Preempted", message=message),
    )
    said = waiting_message(evicted)
    assert said is not None
    assert said.startswith(
        f"Workload {evicted['metadata']['name']} evicted by Kueue by the job of uid 9d1e (Preempted): "
    )
    assert message in said and "waits to be admitted again" in said


def test_no_workload_yet_and_no_conditions_yet_are_said_plainly() -> None:
    assert waiting_message(None) == "waiting for Kueue to create the job's Workload"
    assert "not yet considered" in str(waiting_message(workload()))


def test_the_workload_of_a_job_is_found_by_its_uid_label_skipping_one_being_deleted() -> None:
    mine = workload(uid="uid-1")
    older = workload(uid="uid-1", name="old", creationTimestamp="2026-11-30T09:00:00Z")
    going = workload(uid="uid-1", name="going", creationTimestamp="2026-11-30T11:00:00Z", deletionTimestamp=RESUMED)
    other = workload(uid="uid-2", name="other")
    assert workload_of([older, going, mine, other], "uid-1") is mine
    assert workload_of([other], "uid-1") is None
