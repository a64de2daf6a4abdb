"""Reading a training job's state and result from its status.

The one place that interprets ``status.conditions``: the sync wait, the sensor's ``poke`` and the
trigger all call ``job_state``, so the three paths cannot drift apart. Pure functions over the job
object as the API server returns it (a plain dict).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from airflow_provider_disttrain.kueue import describe_hold, held_by_kueue

# Condition types and the state each one means when it is the job's newest true condition.
_CONDITION_STATES = {
    "Created": "queued",
    "Suspended": "suspended",
    "Running": "running",
    "Restarting": "running",
    "Succeeded": "succeeded",
    "Failed": "failed",
}


class JobState(str, enum.Enum):
    """Where a job is in its life, reduced to what an Airflow task needs to decide."""

    QUEUED = "queued"
    """Submitted, not running yet: no status, or Created (pods Pending or absent)."""
    SUSPENDED = "suspended"
    """``runPolicy.suspend``: no pods; created so (held by a queueing system) or suspended later."""
    RUNNING = "running"
    """Running or Restarting."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED)


def _conditions(job: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((job.get("status") or {}).get("conditions") or [])


def _is_true(condition: Mapping[str, Any]) -> bool:
    return str(condition.get("status", "")).lower() == "true"


def _newest(conditions: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The most recently changed condition; on equal timestamps the later entry in the list wins.

    Timestamps are RFC 3339 with second precision, so two conditions set in one reconcile share one;
    the operators append in the order they set them, which breaks the tie.
    """
    if not conditions:
        return None
    indexed = list(enumerate(conditions))
    indexed.sort(key=lambda item: (_timestamp(item[1]), item[0]))
    return indexed[-1][1]


def _timestamp(condition: Mapping[str, Any]) -> str:
    return str(condition.get("lastTransitionTime") or condition.get("lastUpdateTime") or "")


def _deciding_condition(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The true condition the state comes from: the newest terminal one, else the newest one."""
    true_conditions = [c for c in _conditions(job) if _is_true(c) and c.get("type") in _CONDITION_STATES]
    terminal = [c for c in true_conditions if c.get("type") in ("Succeeded", "Failed")]
    return _newest(terminal) or _newest(true_conditions)


def job_state(job: Mapping[str, Any]) -> JobState:
    """The job's state from its newest true condition; Failed and Succeeded are final once set."""
    newest = _deciding_condition(job)
    if newest is None:
        return JobState.QUEUED
    return JobState(_CONDITION_STATES[str(newest["type"])])


# The mpi-operator writes Running=False with this reason on every suspension, also of a job that never
# ran; the training-operator flips Running to False (reason <Kind>Suspended) only when it was running.
_SUSPENSION_WITHOUT_HISTORY = "MPIJobSuspended"


def has_run(job: Mapping[str, Any]) -> bool:
    """Whether the job's pods have run at some point (so it is no longer "not started yet").

    Read from the conditions: a Running or Restarting condition, true now or flipped to False since,
    or a terminal one. A suspended MPIJob's conditions cannot say; a waiter that saw it running knows.
    """
    for condition in _conditions(job):
        kind = condition.get("type")
        if kind in ("Succeeded", "Failed") and _is_true(condition):
            return True
        if kind in ("Running", "Restarting") and (
            _is_true(condition) or condition.get("reason") != _SUSPENSION_WITHOUT_HISTORY
        ):
            return True
    return False


def newest_true_condition(job: Mapping[str, Any]) -> dict[str, Any] | None:
    true_conditions = [c for c in _conditions(job) if _is_true(c)]
    newest = _newest(true_conditions)
    return dict(newest) if newest else None


def failure_condition(job: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(reason, message)`` of the job's Failed condition, if it has one."""
    for condition in _conditions(job):
        if condition.get("type") == "Failed" and _is_true(condition):
            return str(condition.get("reason") or ""), str(condition.get("message") or "")
    return None


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def job_result(job: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The JSON-safe summary a training task returns to XCom."""
    metadata = job.get("metadata") or {}
    status = job.get("status") or {}
    start = parse_time(status.get("startTime"))
    end = parse_time(status.get("completionTime"))
    duration = (end - start).total_seconds() if start and end else None
    return {
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "kind": kind,
        "uid": metadata.get("uid"),
        "state": job_state(job).value,
        "conditions": [
            {
                key: condition.get(key)
                for key in ("type", "status", "reason", "message", "lastTransitionTime")
                if condition.get(key) is not None
            }
            for condition in _conditions(job)
        ],
        "start_time": status.get("startTime"),
        "completion_time": status.get("completionTime"),
        "duration_seconds": duration,
        "replica_statuses": {
            replica: {counter: int(counts.get(counter) or 0) for counter in ("active", "succeeded", "failed")}
            for replica, counts in (status.get("replicaStatuses") or {}).items()
        },
    }


def describe_state(job: Mapping[str, Any]) -> str:
    """One line for the task log: the state and the newest condition's reason and message."""
    # The condition the state was read from, so a Running set after Failed cannot explain a failure.
    newest = _deciding_condition(job)
    state = job_state(job).value
    if held_by_kueue(job):
        # Suspended by Kueue until its quota admits it: waiting in a queue, not stuck.
        state = describe_hold(job)
    if not newest:
        return f"{state} (no conditions yet)"
    detail = ": ".join(part for part in (newest.get("reason"), newest.get("message")) if part)
    return f"{state} ({newest.get('type')}{' - ' + detail if detail else ''})"
