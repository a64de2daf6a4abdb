"""How long a trigger bears its shared watch's trouble, and what it says when it stops bearing it.

The trigger that calls these on every wake is tested in test_training_job.py; these are the rules.
"""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from airflow_provider_disttrain.hooks.watch_values import WatchProblem
from airflow_provider_disttrain.job.outcome import ERROR, LOST_CONTACT, JobRef
from airflow_provider_disttrain.triggers.watch_trouble import (
    ACCESS_DENIED_GRACE_SECONDS,
    judge_problem,
    seconds_until_judged,
)
from tests.unit.fakes import make_job, running_status

REF = JobRef("PyTorchJob", "train-abc", "default", "uid-1")
JOB = make_job(status=running_status())
TOLERANCE = 120.0
SINCE = 1_000.0  # monotonic seconds when the trouble began


class StoppedClock:
    """A clock standing at ``monotonic`` seconds, 1.7e9 epoch seconds ahead on the wall."""

    def __init__(self, monotonic: float) -> None:
        self._monotonic = monotonic

    def wall(self) -> float:
        return 1_700_000_000.0 + self._monotonic

    def monotonic(self) -> float:
        return self._monotonic

    async def sleep(self, seconds: float) -> None:
        self._monotonic += seconds


def problem(status: int | None = None, *, fatal: bool = False) -> WatchProblem:
    reasons = {401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}
    error = ApiException(status=status, reason=reasons[status]) if status else ConnectionError("refused")
    return WatchProblem(error=error, since=SINCE, status=status, fatal=fatal)


def judge(trouble: WatchProblem | None, *, after: float, had_access: bool = True) -> dict | None:
    return judge_problem(REF, trouble, had_access, JOB, tolerance=TOLERANCE, clock=StoppedClock(SINCE + after))


def test_no_trouble_is_no_outcome_and_nothing_to_judge_later() -> None:
    assert judge(None, after=0.0) is None
    assert seconds_until_judged(None, TOLERANCE, StoppedClock(SINCE)) is None


def test_an_outage_is_borne_for_the_tolerance_then_ends_the_wait_as_lost_contact() -> None:
    assert judge(problem(), after=TOLERANCE - 1) is None

    outcome = judge(problem(), after=TOLERANCE)

    assert outcome is not None and outcome["status"] == LOST_CONTACT
    assert "lost contact with the API server for 120s" in outcome["message"]
    # The job was last seen when the trouble began, on the wall clock: 1.7e9 + SINCE.
    assert "at 2023-11-14 22:30:00 UTC" in outcome["message"]


def test_a_fatal_problem_ends_the_wait_at_once_with_an_error() -> None:
    outcome = judge(problem(404, fatal=True), after=0.0)

    assert outcome is not None and outcome["status"] == ERROR
    assert outcome["message"].startswith(f"watching {REF.title} failed: HTTP 404")
    assert seconds_until_judged(problem(404, fatal=True), TOLERANCE, StoppedClock(SINCE)) is None


@pytest.mark.parametrize(("status", "words"), [(403, "check the connection's RBAC Role"), (401, "credentials")])
def test_a_first_refusal_is_final_and_says_which_refusal(status: int, words: str) -> None:
    outcome = judge(problem(status), after=0.0, had_access=False)

    assert outcome is not None and outcome["status"] == ERROR
    assert words in outcome["message"]


def test_after_access_worked_a_refusal_gets_a_grace_for_a_restarted_api_server() -> None:
    assert judge(problem(403), after=ACCESS_DENIED_GRACE_SECONDS - 1) is None
    outcome = judge(problem(403), after=ACCESS_DENIED_GRACE_SECONDS)
    assert outcome is not None and outcome["status"] == ERROR


def test_the_trouble_is_judged_again_at_the_end_of_its_grace_or_tolerance() -> None:
    clock = StoppedClock(SINCE + 10.0)

    assert seconds_until_judged(problem(403), TOLERANCE, clock) == pytest.approx(
        ACCESS_DENIED_GRACE_SECONDS - 10.0, abs=0.1
    )
    assert seconds_until_judged(problem(), TOLERANCE, clock) == pytest.approx(TOLERANCE - 10.0, abs=0.1)
    assert seconds_until_judged(problem(), TOLERANCE, StoppedClock(SINCE + 500.0)) == pytest.approx(0.0, abs=0.1)
