"""Sync mode (and a poking sensor): a job its controller refuses (a Warning event, no condition) fails the
task at once with the controller's words, instead of waiting out ``startup_timeout``; a healthy job costs
no event reads."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import JobFailedInTrainingError
from airflow_provider_disttrain.failures.controller_refusal import LOOK_EVERY_SECONDS
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from tests.unit.fakes import FakeTrainingJobHook, make_context, make_job, running_status, succeeded_status, with_hook

REFUSAL = "Found validation errors: spec.mpiReplicaSpecs[Launcher].replicas: Invalid value: 2: must be 1"


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> MPIJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "horovod",
        "image": "horovod:1",
        "command": ["mpirun", "python", "train.py"],
        "num_workers": 2,
        "wait_policy": WaitPolicy(poll_interval=1.0),
    }
    return with_hook(MPIJobOperator(**{**arguments, **kwargs}), hook)


def validation_error(job: dict[str, Any], uid: str | None = None) -> dict[str, Any]:
    metadata = job["metadata"]
    return {
        "type": "Warning",
        "reason": "ValidationError",
        "message": REFUSAL,
        "involvedObject": {"kind": "MPIJob", "name": metadata["name"], "uid": uid or metadata["uid"]},
        "lastTimestamp": "2024-05-01T10:00:00Z",
    }


def refuse_after_get(hook: FakeTrainingJobHook, number: int, uid: str | None = None) -> None:
    """The controller records its refusal of the created job just before the ``number``-th read."""
    hook.on_get = lambda count: count == number and hook.events.append(validation_error(hook.only_job(), uid))


def test_a_refused_job_fails_the_task_with_the_controllers_words() -> None:
    hook = FakeTrainingJobHook()  # no progression: the job never gets a condition
    refuse_after_get(hook, 2)
    operator = make_operator(hook)

    with pytest.raises(JobFailedInTrainingError) as failed:
        operator.execute(make_context())

    message = str(failed.value)
    assert "was refused by its controller and will never run: ValidationError: " + REFUSAL in message
    assert failed.value.failure is not None and failed.value.failure["reason"] == "ValidationError"
    # Polled every second, the events were read only every LOOK_EVERY_SECONDS: at the first poll (nothing
    # yet) and at the first poll LOOK_EVERY_SECONDS later.
    name = hook.only_job()["metadata"]["name"]
    assert len(hook.called("get_job")) > 2
    assert [call[0][1] for call in hook.called("list_warning_events")][:2] == [{name}, {name}]
    assert {name} not in [call[0][1] for call in hook.called("list_warning_events")][2:]


def test_the_refusal_of_an_earlier_job_of_that_name_does_not_end_the_wait() -> None:
    hook = FakeTrainingJobHook(
        progression=[{}, {}, {}, running_status(leader="Launcher"), succeeded_status(leader="Launcher")]
    )
    refuse_after_get(hook, 1, uid="uid-of-a-deleted-job")

    result = make_operator(hook, wait_policy=WaitPolicy(poll_interval=LOOK_EVERY_SECONDS)).execute(make_context())

    assert result["state"] == "succeeded"
    assert len(hook.called("list_warning_events")) >= 1  # it looked, and went on waiting


def test_a_job_with_conditions_costs_no_event_reads() -> None:
    hook = FakeTrainingJobHook(progression=[running_status(leader="Launcher"), succeeded_status(leader="Launcher")])

    make_operator(hook).execute(make_context())

    assert hook.called("list_warning_events") == []


def test_a_sensor_on_a_refused_job_fails_with_the_controllers_words() -> None:
    hook = FakeTrainingJobHook()
    job = hook.add_job(make_job("pi", hook.namespace, "MPIJob", uid="uid-7"))  # no condition
    hook.events.append(validation_error(job))
    sensor = with_hook(TrainingJobSensor(task_id="wait", job_name="pi", kind="MPIJob", poke_interval=0.01), hook)

    with pytest.raises(JobFailedInTrainingError, match="was refused by its controller and will never run"):
        sensor.poke(make_context())
