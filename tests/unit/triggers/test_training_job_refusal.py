"""A job its controller refuses (a Warning event, no condition) ends the trigger's wait within seconds, in the
controller's words; the real trigger and watch against the fake API server, on virtual time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_provider_disttrain.failures.controller_refusal import LOOK_EVERY_SECONDS
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from tests.unit.fakes import epoch, make_job, running_status, succeeded_status
from tests.unit.triggers.helpers import make_trigger, run_once, started

pytestmark = pytest.mark.usefixtures("virtual_clock")

REFUSAL = "Found validation errors: spec.mpiReplicaSpecs[Launcher]: Required value: must have Launcher replica spec"
HOUR = 3600.0


def mpijob(uid: str = "uid-1", status: dict[str, Any] | None = None) -> dict[str, Any]:
    return make_job("train-abc", "ml", "MPIJob", uid=uid, status=status, labels={TASK_INSTANCE_LABEL: "abc123"})


def validation_error(uid: str = "uid-1") -> dict[str, Any]:
    """The event mpi-operator v0.8's syncHandler records for an MPIJob its validation refuses."""
    return {
        "metadata": {"name": "train-abc.1", "namespace": "ml"},
        "type": "Warning",
        "reason": "ValidationError",
        "message": REFUSAL,
        "involvedObject": {"kind": "MPIJob", "namespace": "ml", "name": "train-abc", "uid": uid},
        "lastTimestamp": "2024-05-01T10:00:00Z",
    }


def mpi_trigger(apiserver: Any) -> Any:
    return make_trigger(apiserver, kind="MPIJob", startup_deadline=epoch(HOUR), execution_deadline=epoch(2 * HOUR))


async def test_a_refused_job_fails_at_once_with_the_controllers_words(apiserver: Any) -> None:
    await apiserver.put(mpijob(), "mpijobs")
    apiserver.core_events.append(validation_error())

    event = await run_once(mpi_trigger(apiserver))

    assert event["status"] == "failed"
    assert event["message"] == (
        f"MPIJob ml/train-abc was refused by its controller and will never run: ValidationError: {REFUSAL}"
    )
    [query] = apiserver.queries("events")
    assert query["fieldSelector"] == "type=Warning,involvedObject.name=train-abc"


async def test_a_refusal_recorded_after_the_first_look_is_found_on_the_next(apiserver: Any) -> None:
    # The job never changes after the controller's event: the trigger must come back by itself, long
    # before its startup deadline (a timeout would be the outcome then).
    await apiserver.put(mpijob(), "mpijobs")
    task = await started(mpi_trigger(apiserver), apiserver)
    while apiserver.count("events") < 1:
        await asyncio.sleep(0.01)
    apiserver.core_events.append(validation_error())

    event = await task

    assert event["status"] == "failed"
    assert REFUSAL in event["message"]
    assert apiserver.count("events") == 2  # one look per LOOK_EVERY_SECONDS, not a spin


async def test_the_refusal_of_an_earlier_job_of_that_name_is_not_this_ones(apiserver: Any) -> None:
    await apiserver.put(mpijob(), "mpijobs")
    apiserver.core_events.append(validation_error(uid="uid-of-a-deleted-job"))
    task = await started(mpi_trigger(apiserver), apiserver)
    while apiserver.count("events") < 2:
        await asyncio.sleep(LOOK_EVERY_SECONDS / 10)

    await apiserver.put(mpijob(status=running_status(leader="Launcher")), "mpijobs")
    await apiserver.put(mpijob(status=succeeded_status(leader="Launcher")), "mpijobs")
    event = await task

    assert event["status"] == "success"


async def test_a_job_with_a_condition_costs_no_event_reads(apiserver: Any) -> None:
    await apiserver.put(mpijob(status=running_status(leader="Launcher")), "mpijobs")
    apiserver.core_events.append(validation_error())  # never read: the controller accepted the job
    task = await started(mpi_trigger(apiserver), apiserver)

    await apiserver.put(mpijob(status=succeeded_status(leader="Launcher")), "mpijobs")
    event = await task

    assert event["status"] == "success"
    assert apiserver.count("events") == 0
