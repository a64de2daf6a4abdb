"""``Deadlines``: the startup, queue and execution deadlines of a wait, counted on the worker's clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_disttrain.job.deadlines import DEFERRAL_BACKSTOP, Deadlines, job_created_at
from tests.unit.fakes import START, make_job

CREATED = datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc).timestamp()  # the fakes' START
NOW = CREATED + 3_600.0


def deadlines_for(job: dict, *, submitted_at: float | None, task_started_at: datetime | None = None) -> Deadlines:
    return Deadlines.for_job(
        job,
        submitted_at=submitted_at,
        startup_timeout=60.0,
        queue_timeout=600.0,
        execution_timeout=timedelta(hours=2),
        task_started_at=task_started_at,
        now=NOW,
    )


def test_startup_and_queue_count_from_when_this_task_submitted_the_job() -> None:
    """A retry taking over a job counts from the first try's submission, not from the job's creation."""
    submitted = NOW - 30.0
    deadlines = deadlines_for(make_job(created=START), submitted_at=submitted)

    assert (deadlines.startup, deadlines.queue) == (submitted + 60.0, submitted + 600.0)


def test_a_job_no_try_recorded_submitting_counts_from_its_creation_timestamp() -> None:
    deadlines = deadlines_for(make_job(created=START), submitted_at=None)

    assert (deadlines.startup, deadlines.queue) == (CREATED + 60.0, CREATED + 600.0)


def test_a_job_without_a_readable_creation_time_counts_from_now() -> None:
    job = make_job()
    job["metadata"]["creationTimestamp"] = "not a time"

    assert deadlines_for(job, submitted_at=None).startup == NOW + 60.0
    assert job_created_at(job, default=NOW) == NOW


def test_the_execution_deadline_counts_from_the_task_start_else_from_now() -> None:
    started = datetime.fromtimestamp(NOW - 100.0, tz=timezone.utc)

    assert deadlines_for(make_job(), submitted_at=NOW, task_started_at=started).execution == NOW - 100.0 + 7_200.0
    assert deadlines_for(make_job(), submitted_at=NOW).execution == NOW + 7_200.0


def test_no_timeout_is_no_deadline() -> None:
    deadlines = Deadlines.for_job(
        make_job(),
        submitted_at=NOW,
        startup_timeout=None,
        queue_timeout=None,
        execution_timeout=None,
        task_started_at=None,
        now=NOW,
    )

    assert deadlines == Deadlines()


@pytest.mark.parametrize(
    ("timeout", "execution"),
    [(timedelta(minutes=5), NOW + 300.0), (90, NOW + 90.0), (None, None), (0, None), (timedelta(0), None)],
)
def test_a_sensor_timeout_is_only_an_execution_deadline(
    timeout: timedelta | float | None, execution: float | None
) -> None:
    assert Deadlines.within(timeout, now=NOW) == Deadlines(execution=execution)


def test_the_deferral_timeout_is_a_backstop_after_the_execution_deadline() -> None:
    assert Deadlines(execution=NOW + 60.0).deferral_timeout(now=NOW) == timedelta(seconds=60) + DEFERRAL_BACKSTOP
    # A deadline already past leaves the backstop alone, never a negative timeout.
    assert Deadlines(execution=NOW - 60.0).deferral_timeout(now=NOW) == DEFERRAL_BACKSTOP
    assert Deadlines(startup=NOW + 60.0).deferral_timeout(now=NOW) is None
    assert Deadlines(execution=NOW).deferral_timeout(now=NOW, backstop=timedelta(seconds=5)) == timedelta(seconds=5)
