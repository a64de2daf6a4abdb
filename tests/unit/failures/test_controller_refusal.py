"""Which Warning events say a job's controller refused it, and how often a wait looks for them.

The waits that use these (the sync poll, the trigger) are tested in operators/test_waiting.py and
triggers/test_training_job_refusal.py; these are the rules themselves.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from airflow_provider_disttrain.failures.controller_refusal import (
    LOOK_EVERY_SECONDS,
    RefusalLooks,
    awaits_controller,
    read_refusal,
    refusal,
    refused,
    warning_events_selector,
)
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.outcome import FAILED, JobRef
from tests.unit.fakes import condition, make_job, running_status

MPIJOB = get_job_kind("MPIJob")
PYTORCHJOB = get_job_kind("PyTorchJob")
JOB = make_job(kind="MPIJob", uid="uid-1")
REF = JobRef("MPIJob", "train-abc", "default", "uid-1")


def event(
    reason: str = "ValidationError", *, uid: str = "uid-1", kind: str = "MPIJob", at: str = "", message: str = "x"
):
    return {
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "involvedObject": {"kind": kind, "name": "train-abc", "uid": uid},
    }


def test_the_selector_asks_for_the_warning_events_of_one_object() -> None:
    assert warning_events_selector("train-abc") == "type=Warning,involvedObject.name=train-abc"


def test_only_a_job_of_a_kind_that_refuses_by_event_and_without_a_condition_awaits_its_controller() -> None:
    assert awaits_controller(MPIJOB, JOB)
    assert not awaits_controller(MPIJOB, make_job(kind="MPIJob", status={"conditions": [condition("Created", "t")]}))
    assert not awaits_controller(MPIJOB, None)
    assert not awaits_controller(PYTORCHJOB, make_job())


def test_the_newest_refusal_of_this_very_job_is_its_controllers_word() -> None:
    events = [
        event(at="2024-05-01T10:00:01Z", message="old words"),
        event(at="2024-05-01T10:00:09Z", message="  Found validation errors: replicas  "),
        event("FailedCreate", at="2024-05-01T10:00:10Z", message="not a refusal reason"),
    ]

    assert refusal(MPIJOB, JOB, events) == "ValidationError: Found validation errors: replicas"


@pytest.mark.parametrize(
    "other",
    [event(uid="uid-of-an-earlier-job"), event(kind="PyTorchJob"), event("BackOff")],
    ids=["an earlier job of that name", "another kind", "another reason"],
)
def test_an_event_about_another_object_or_for_another_reason_is_no_refusal(other: dict[str, Any]) -> None:
    assert refusal(MPIJOB, JOB, [other]) is None


def test_events_that_cannot_be_read_delay_the_answer_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    class Unreachable:
        def list_warning_events(self, namespace: str, names: set[str]) -> list[dict[str, Any]]:
            raise ConnectionError("API server unreachable")

    class Answers:
        def list_warning_events(self, namespace: str, names: set[str]) -> list[dict[str, Any]]:
            assert (namespace, names) == ("default", {"train-abc"})
            return [event(message="bad slots")]

    log = logging.getLogger("test_controller_refusal")
    with caplog.at_level(logging.WARNING, logger=log.name):
        assert read_refusal(Unreachable(), MPIJOB, REF, JOB, log) is None
    assert "Could not read the Warning events" in caplog.text
    assert read_refusal(Answers(), MPIJOB, REF, JOB, log) == "ValidationError: bad slots"


def test_a_refused_job_is_a_failure_in_the_controllers_words() -> None:
    outcome = refused(REF, JOB, "ValidationError: bad slots")

    assert outcome["status"] == FAILED
    assert outcome["message"].endswith("was refused by its controller and will never run: ValidationError: bad slots")


def test_the_events_are_looked_at_once_per_interval_and_only_while_the_job_has_no_condition() -> None:
    looks = RefusalLooks(MPIJOB)

    assert looks.seconds_until_due(JOB, now=100.0) == 0.0
    assert looks.due(JOB, now=100.0)
    assert not looks.due(JOB, now=100.0 + LOOK_EVERY_SECONDS - 1)
    assert looks.seconds_until_due(JOB, now=104.0) == LOOK_EVERY_SECONDS - 4.0
    assert looks.due(JOB, now=100.0 + LOOK_EVERY_SECONDS)
    started = make_job(kind="MPIJob", status=running_status(leader="Launcher"))
    assert looks.seconds_until_due(started, now=1_000.0) is None
    assert not looks.due(started, now=1_000.0)
