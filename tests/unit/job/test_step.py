"""``step``: the wait's one move, pure, the same for the sync poll and the trigger."""

from __future__ import annotations

from typing import Any

from airflow_provider_disttrain.job import step as steps
from airflow_provider_disttrain.job.deadlines import Deadlines
from airflow_provider_disttrain.job.outcome import SUCCESS, TIMEOUT, JobRef
from airflow_provider_disttrain.job.step import Wake, next_wake, step
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.operators import waiting
from airflow_provider_disttrain.triggers import training_job
from tests.unit.fakes import make_job, queued_status, running_status, succeeded_status

REF = JobRef("PyTorchJob", "train-abc", "default", "uid-1")
DEADLINES = Deadlines(startup=1_000.0, execution=5_000.0)


def view(status: dict[str, Any]) -> JobView:
    return JobView.observe(REF, make_job(status=status, created="1970-01-01T00:00:00Z"))


def test_a_look_before_any_deadline_wakes_at_the_next_one_that_applies() -> None:
    # Queued: the startup deadline comes first; running: only the execution deadline applies.
    assert step(view(queued_status()), DEADLINES, now=400.0) == Wake(1_000.0)
    assert step(view(running_status()), DEADLINES, now=400.0) == Wake(5_000.0)
    assert step(view(running_status()), Deadlines(), now=400.0) == Wake(None)
    assert Wake(1_000.0).seconds_from(400.0) == 600.0
    assert Wake(1_000.0).seconds_from(1_200.0) == 0.0
    assert Wake(None).seconds_from(400.0) is None


def test_a_look_that_ends_the_wait_is_its_outcome() -> None:
    ended = step(view(succeeded_status()), DEADLINES, now=400.0)
    late = step(view(queued_status()), DEADLINES, now=1_000.0)

    assert not isinstance(ended, Wake) and ended["status"] == SUCCESS
    assert not isinstance(late, Wake) and late["status"] == TIMEOUT and "startup_timeout" in late["message"]


def test_before_the_first_look_the_wait_wakes_at_its_earliest_deadline() -> None:
    assert next_wake(None, DEADLINES, now=400.0) == Wake(1_000.0)


def test_the_sync_poll_and_the_trigger_drive_the_same_step() -> None:
    assert waiting.step is steps.step
    assert training_job.step is steps.step
