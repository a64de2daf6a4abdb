"""How long a trigger bears its shared watch's trouble (``hooks.watch_values.WatchProblem``), and what it says then.

An outage ends the wait with ``lost_contact`` after the operator's ``api_failure_tolerance``; a refusal
(401, 403) ends it at once, unless access worked before (a restarted API server refuses until its RBAC
caches have synced: a grace); a fatal problem (retrying will not help) ends it with an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.hooks.api_errors import describe_error
from airflow_provider_disttrain.job.outcome import ERROR, JobRef, lost_contact, make_outcome
from airflow_provider_disttrain.utils.clock import Clock

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.watch_values import WatchProblem

ACCESS_DENIED_GRACE_SECONDS = 30.0


def access_denied_message(title: str, problem: WatchProblem) -> str:
    """Which refusal it is: bad credentials (401) or missing RBAC permission (403)."""
    error = problem.error
    detail = f"{getattr(error, 'reason', '') or ''}".strip() or describe_error(error)
    if problem.status == 401:
        return (
            f"the API server rejected the connection's credentials while watching {title} "
            f"(401 {detail}), even after reloading them (exec plugin or token file); check the "
            "connection's kubeconfig and that its token can still be issued"
        )
    return (
        f"the API server refused access to {title} (403 {detail}); check the connection's RBAC Role "
        "(it needs get, list and watch on the job kind)"
    )


def judge_problem(
    ref: JobRef,
    problem: WatchProblem | None,
    had_access: bool,
    job: Mapping[str, Any] | None,
    *,
    tolerance: float,
    clock: Clock,
) -> dict[str, Any] | None:
    """An error outcome when the watch's trouble has lasted longer than this trigger tolerates."""
    if problem is None:
        return None
    error = problem.error
    if problem.fatal:
        return make_outcome(ref, ERROR, f"watching {ref.title} failed: {describe_error(error)}", job)
    waited = clock.monotonic() - problem.since
    if problem.denied:
        # A first refusal is final; after access worked, a restarted API server gets a grace.
        if had_access and waited < ACCESS_DENIED_GRACE_SECONDS:
            return None
        return make_outcome(ref, ERROR, access_denied_message(ref.title, problem), job)
    if waited >= tolerance:
        # Not an error of the job's: the operator ends the task without deleting it (``ending``). The
        # watch's view of the job is as of the moment the trouble began.
        last_contact = clock.wall() - (clock.monotonic() - problem.since)
        return lost_contact(ref, job, waited=waited, last_contact=last_contact, error=describe_error(error))
    return None


def seconds_until_judged(problem: WatchProblem | None, tolerance: float, clock: Clock) -> float | None:
    """When the watch's trouble is judged again (the end of its grace or tolerance); None without one."""
    if problem is None or problem.fatal:
        return None
    limit = ACCESS_DENIED_GRACE_SECONDS if problem.denied else tolerance
    return max(0.0, problem.since + limit - clock.monotonic()) + 0.01
