"""The task side reads the wait's ``Outcome`` (not the event dict), and the sensor ends a failure as the
training operators do (``operators.ending``): the same explanation, class and XCom, without the cleanup."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import JobFailedInTrainingError
from airflow_provider_disttrain.failures.failure_class import FailureCause, FailureClass
from airflow_provider_disttrain.job.outcome import FAILED, JobRef, Outcome, make_outcome
from airflow_provider_disttrain.operators.ending import described_failure
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from tests.unit.fakes import (
    OOM_KILLED,
    FakeTrainingJobHook,
    failed_status,
    make_context,
    make_job,
    make_pod,
    with_hook,
)

REF = JobRef("PyTorchJob", "train-abc", "default", "uid-1")


def failed_job_hook() -> FakeTrainingJobHook:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("train-abc", uid="uid-1", status=failed_status()))
    hook.pods["train-abc"] = [make_pod("train-abc", "master", 0, phase="Failed", terminated=OOM_KILLED)]
    return hook


def test_a_failure_is_described_with_its_class_and_pushed_to_xcom_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.log import mask_secret

    secret = "ghp_endingSecret0123456789"
    mask_secret(secret)
    context = make_context()
    monkeypatch.setattr("airflow.sdk.get_current_context", lambda: context)
    cause = FailureCause(FailureClass.TRAINING, "OOMKilled", f"master-0: ValueError: {secret}")

    message, failure = described_failure("PyTorchJob default/train-abc failed", cause, logging.getLogger(__name__))

    assert message == f"PyTorchJob default/train-abc failed\n{cause.describe()}"
    assert failure["class"] == "training" and secret not in repr(failure)
    assert dict(context["ti"].pushed)["failure"] == failure


def test_the_sensor_and_the_operator_end_the_same_failure_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """One outcome, read once as an ``Outcome``: the same message, class and failure XCom from both; only the
    operator, which owns the job, deletes it (its cleanup policy says so)."""
    event = make_outcome(REF, FAILED, "PyTorchJob default/train-abc failed")
    errors: dict[str, Any] = {}
    pushed: dict[str, Any] = {}
    hooks = {"operator": failed_job_hook(), "sensor": failed_job_hook()}
    tasks = {
        "operator": TrainingJobOperator(
            task_id="train",
            image="trainer:1",
            num_workers=1,
            job_name="train-abc",
            wait_policy=WaitPolicy(poll_interval=0.01),
            cleanup_policy=CleanupPolicy(on_finish="always"),
        ),
        "sensor": TrainingJobSensor(task_id="wait", job_name="train-abc", deferrable=True),
    }
    for who, task in tasks.items():
        context = make_context()
        monkeypatch.setattr("airflow.sdk.get_current_context", lambda context=context: context)
        with pytest.raises(JobFailedInTrainingError) as raised:
            kwargs = {"job_uid": "uid-1"} if who == "operator" else {}
            with_hook(task, hooks[who]).execute_complete(context, event, **kwargs)
        errors[who], pushed[who] = raised.value, dict(context["ti"].pushed)["failure"]

    assert str(errors["sensor"]) == str(errors["operator"])
    assert errors["sensor"].failure == errors["operator"].failure == pushed["sensor"] == pushed["operator"]
    assert "delete_job" in hooks["operator"].api_calls() and "delete_job" not in hooks["sensor"].api_calls()


def test_an_event_from_an_older_trigger_is_read_once_into_an_outcome() -> None:
    """``Outcome.from_event`` is the task side's one reading of the event; an unknown status is refused."""
    event = make_outcome(REF, FAILED, "failed", make_job("train-abc", uid="uid-1", status=failed_status()))

    outcome = Outcome.from_event(event)

    assert outcome.status == FAILED and outcome.ref == REF and outcome.to_event() == event
    with pytest.raises(ValueError, match="outcome status"):
        Outcome.from_event({**event, "status": "exploded"})
