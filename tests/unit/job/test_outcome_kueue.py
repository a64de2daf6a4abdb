"""``outcome`` for jobs held by Kueue: the startup clock starts at admission, ``queue_deadline`` bounds the wait."""

from __future__ import annotations

from airflow_provider_disttrain.job.outcome import TIMEOUT, JobRef, check_job, seconds_to_deadline
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.kube.conditions import parse_time
from tests.unit.kueue.test_hold import CREATED, QUOTA_MESSAGE, RESUMED, held, queued_job, released

REF = JobRef("PyTorchJob", "train-abc", "default", "uid-1")
CREATED_AT = parse_time(CREATED).timestamp()  # type: ignore[union-attr]
RESUMED_AT = parse_time(RESUMED).timestamp()  # type: ignore[union-attr]
STARTUP = 60.0  # startup_timeout; the deadline travels as creation + startup_timeout


def test_no_startup_timeout_while_kueue_holds_the_job() -> None:
    # An hour in the queue, far past the creation-based startup deadline: still waiting.
    now = CREATED_AT + 3600
    assert check_job(REF, held(), now=now, startup_deadline=CREATED_AT + STARTUP) is None
    assert seconds_to_deadline(JobState.SUSPENDED, now=now, startup_deadline=CREATED_AT + STARTUP, job=held()) is None


def test_the_startup_clock_starts_when_kueue_releases_the_job() -> None:
    deadline = CREATED_AT + STARTUP
    job = released()
    assert check_job(REF, job, now=RESUMED_AT + STARTUP - 1, startup_deadline=deadline) is None
    assert seconds_to_deadline(JobState.QUEUED, now=RESUMED_AT + STARTUP - 1, startup_deadline=deadline, job=job) == 1.0
    outcome = check_job(REF, job, now=RESUMED_AT + STARTUP, startup_deadline=deadline)
    assert outcome is not None and outcome["status"] == TIMEOUT
    assert "did not start within startup_timeout" in outcome["message"]


def test_a_job_without_the_queue_label_keeps_the_creation_based_startup_deadline() -> None:
    job = queued_job(*held()["status"]["conditions"], queue=None)
    outcome = check_job(REF, job, now=CREATED_AT + STARTUP, startup_deadline=CREATED_AT + STARTUP)
    assert outcome is not None and outcome["status"] == TIMEOUT


def test_the_queue_deadline_ends_the_wait_with_kueues_reason() -> None:
    queue_deadline = CREATED_AT + 30
    assert check_job(REF, held(), now=queue_deadline - 1, queue_deadline=queue_deadline) is None
    remaining = seconds_to_deadline(
        JobState.SUSPENDED, now=queue_deadline - 1, job=held(), queue_deadline=queue_deadline
    )
    assert remaining == 1.0

    outcome = check_job(REF, held(), now=queue_deadline, queue_deadline=queue_deadline, waiting_reason=QUOTA_MESSAGE)

    assert outcome is not None and outcome["status"] == TIMEOUT
    assert outcome["message"].startswith("PyTorchJob default/train-abc was not admitted by Kueue within queue_timeout")
    assert "queued by Kueue in LocalQueue 'default'" in outcome["message"]
    assert outcome["message"].endswith(f"Kueue: {QUOTA_MESSAGE}")


def test_the_queue_deadline_no_longer_applies_once_admitted_or_once_it_ran() -> None:
    late = CREATED_AT + 3600
    assert check_job(REF, released(), now=late, queue_deadline=CREATED_AT + 30) is None
    assert seconds_to_deadline(JobState.QUEUED, now=late, job=released(), queue_deadline=CREATED_AT + 30) is None
    # Preempted after it ran: waiting again, but it was admitted once.
    assert check_job(REF, held(), now=late, queue_deadline=CREATED_AT + 30, has_run=True) is None


def test_the_execution_timeout_message_carries_kueues_reason_while_held() -> None:
    outcome = check_job(REF, held(), now=CREATED_AT + 10, execution_deadline=CREATED_AT, waiting_reason=QUOTA_MESSAGE)
    assert outcome is not None and outcome["status"] == TIMEOUT
    assert "execution_timeout" in outcome["message"] and outcome["message"].endswith(QUOTA_MESSAGE)
