"""``Outcome``: the one schema of a wait's ending, written into the trigger's event and read back from it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import JobTimeoutError
from airflow_provider_disttrain.job.outcome import SUCCESS, TIMEOUT, JobRef, Outcome, make_outcome
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from tests.unit.fakes import FakeTrainingJobHook, make_context, make_job, running_status, succeeded_status, with_hook
from tests.unit.operators.test_ending_uid import make_operator

REF = JobRef("PyTorchJob", "train-abc", "default", "uid-1")


def test_an_outcome_is_its_event_and_back() -> None:
    event = make_outcome(REF, SUCCESS, "PyTorchJob default/train-abc succeeded", make_job(status=succeeded_status()))

    outcome = Outcome.from_event(json.loads(json.dumps(event)))  # as Airflow stores and hands it back

    assert (outcome.status, outcome.state, outcome.ref) == (SUCCESS, "succeeded", REF)
    assert outcome.to_event() == event
    with pytest.raises(AttributeError):
        outcome.status = TIMEOUT  # type: ignore[misc]  # frozen: a reading cannot change what the trigger said


def test_a_newer_triggers_extra_keys_are_ignored_and_a_missing_one_is_named() -> None:
    event = {**make_outcome(REF, TIMEOUT, "too slow"), "retry_after": 30}

    assert Outcome.from_event(event).to_event() == make_outcome(REF, TIMEOUT, "too slow")
    with pytest.raises(ValueError, match="trigger event: missing status"):
        Outcome.from_event({key: value for key, value in event.items() if key != "status"})
    with pytest.raises(ValueError, match="'paused' is not one of success"):
        Outcome.from_event({**event, "status": "paused"})


def test_the_operator_resumes_from_the_event_through_the_outcome() -> None:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("train-abc", uid="uid-1", status=running_status()))
    event: dict[str, Any] = {**make_outcome(REF, TIMEOUT, "did not finish"), "retry_after": 30}

    with pytest.raises(JobTimeoutError, match="did not finish"):
        make_operator(hook, retries=0).execute_complete(make_context(), event, job_uid="uid-1")
    # The timeout's ending deleted the task's own job (the uid the event and the task agree on).
    assert [kwargs["uid"] for _, kwargs in hook.called("delete_job")] == ["uid-1"]
    with pytest.raises(ValueError, match="missing status"):
        make_operator(hook).execute_complete(make_context(), {"name": "train-abc"}, job_uid="uid-1")


def test_the_sensor_resumes_from_the_event_through_the_outcome() -> None:
    hook = FakeTrainingJobHook()
    sensor = with_hook(TrainingJobSensor(task_id="watch", kind="PyTorchJob", job_name="train-abc"), hook)
    event = make_outcome(REF, SUCCESS, "done", make_job(status=succeeded_status()))

    assert sensor.execute_complete(make_context(), {**event, "retry_after": 30}) == event["job"]
    with pytest.raises(ValueError, match="missing status"):
        sensor.execute_complete(make_context(), {"name": "train-abc"})
