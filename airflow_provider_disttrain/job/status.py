"""Reading a training job's state and result from its status.

The one place that interprets ``status.conditions``: the sync wait, the sensor's ``poke`` and the
trigger all read ``job_state`` through one ``JobView`` per look, so the paths cannot drift apart. Pure
functions over the job object as the API server returns it (a plain dict) and its kind's table entry
(``kind``: the view's, looked up once per look rather than by every function).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.job.trainer_status import trainer_status_result
from airflow_provider_disttrain.kube.conditions import conditions, is_true, parse_time
from airflow_provider_disttrain.kueue.hold import describe_hold, held_by_kueue, queue_name

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


def _condition_states(kind: JobKind) -> dict[str, str]:
    # A TrainJob says Complete where the training-operator says Succeeded (the kinds table knows which).
    return {**_CONDITION_STATES, kind.status.success_condition: "succeeded"}


def _terminal_types(kind: JobKind) -> tuple[str, str]:
    return (kind.status.success_condition, "Failed")


def _deciding_condition(job: Mapping[str, Any], kind: JobKind) -> Mapping[str, Any] | None:
    """The true condition the state comes from: the newest terminal one, else the newest one."""
    states = _condition_states(kind)
    true_conditions = [c for c in conditions(job) if is_true(c) and c.get("type") in states]
    terminal = [c for c in true_conditions if c.get("type") in _terminal_types(kind)]
    return _newest(terminal) or _newest(true_conditions)


def replica_counts(job: Mapping[str, Any], kind: JobKind) -> dict[str, dict[str, int]]:
    """Per replica type (per replicated job for a TrainJob): its active, succeeded and failed counters."""
    raw = (job.get("status") or {}).get(kind.status.replica_statuses_key) or {}
    if kind.status.replica_statuses_list_key is not None:
        # A list keyed by name (TrainJob jobsStatus[]), e.g. [{"name": "node", "active": 1, "ready": 1}].
        key = kind.status.replica_statuses_list_key
        entries = raw if isinstance(raw, list) else []
        raw = {str(entry.get(key)): entry for entry in entries if isinstance(entry, Mapping)}
    counters = ("active", "succeeded", "failed", *kind.status.running_counters)
    return {
        str(replica): {counter: int(counts.get(counter) or 0) for counter in dict.fromkeys(counters)}
        for replica, counts in raw.items()
        if isinstance(counts, Mapping)
    }


def _counts_show_running(job: Mapping[str, Any], kind: JobKind) -> bool:
    """For a kind without a Running condition: whether a replica's counters say its pods run."""
    counters = kind.status.running_counters
    return any(counts.get(counter) for counts in replica_counts(job, kind).values() for counter in counters)


def job_state(job: Mapping[str, Any], kind: JobKind) -> JobState:
    """The job's state from its newest true condition; Failed and Succeeded are final once set.

    A kind without a Running condition (TrainJob: only Suspended, Complete, Failed) runs when its
    replica counters say so, and is queued until then.
    """
    newest = _deciding_condition(job, kind)
    if newest is None:
        return JobState.RUNNING if _counts_show_running(job, kind) else JobState.QUEUED
    return JobState(_condition_states(kind)[str(newest["type"])])


def has_run(job: Mapping[str, Any], kind: JobKind) -> bool:
    """Whether the job's pods have run at some point (so it is no longer "not started yet").

    Read from the conditions: a Running or Restarting condition, true now or flipped to False since,
    or a terminal one; for a TrainJob, its replicated jobs' counters. A suspended MPIJob's conditions
    cannot say, nor a suspended TrainJob's counters (its Jobs are suspended); a waiter that saw it
    running knows.
    """
    if _counts_show_running(job, kind):
        return True
    terminal_types = _terminal_types(kind)
    # The training-operator flips Running to False (reason <Kind>Suspended) only when the job was running;
    # the mpi-operator writes it on every suspension (the table's suspension_without_history_reason).
    never_ran_reason = kind.status.suspension_without_history_reason
    for condition in conditions(job):
        type_ = condition.get("type")
        if type_ in terminal_types and is_true(condition):
            return True
        if type_ in ("Running", "Restarting") and (
            is_true(condition) or never_ran_reason is None or condition.get("reason") != never_ran_reason
        ):
            return True
    return False


def failure_condition(job: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(reason, message)`` of the job's Failed condition, if it has one."""
    for condition in conditions(job):
        if condition.get("type") == "Failed" and is_true(condition):
            return str(condition.get("reason") or ""), str(condition.get("message") or "")
    return None


def job_times(job: Mapping[str, Any], kind: JobKind) -> tuple[Any, Any]:
    """``(start, completion)`` as the status gives them; for a kind whose status has no times (TrainJob),
    the time it was last resumed (else created) and the time its terminal condition became true."""
    status = job.get("status") or {}
    if kind.status.has_times:
        return status.get("startTime"), status.get("completionTime")
    every = conditions(job)
    resumed = [c for c in every if c.get("type") == "Suspended" and not is_true(c)]
    start = _timestamp(resumed[-1]) if resumed else (job.get("metadata") or {}).get("creationTimestamp")
    finished = _newest([c for c in every if c.get("type") in _terminal_types(kind) and is_true(c)])
    return start or None, _timestamp(finished) if finished else None


def job_result(job: Mapping[str, Any], name: str, kind: JobKind, state: JobState) -> dict[str, Any]:
    """The JSON-safe summary a training task returns to XCom (with ``trainer_status`` when the trainer reported).

    ``name``: the kind the result names (the task's); ``state``: the job's ``job_state``, as the caller's
    one look at it read it (``JobView.result``).
    """
    metadata = job.get("metadata") or {}
    start_time, completion_time = job_times(job, kind)
    start = parse_time(start_time)
    end = parse_time(completion_time)
    duration = (end - start).total_seconds() if start and end else None
    return {
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "kind": name,
        "uid": metadata.get("uid"),
        "local_queue": queue_name(job),
        "state": state.value,
        "conditions": [
            {
                key: condition.get(key)
                for key in ("type", "status", "reason", "message", "lastTransitionTime")
                if condition.get(key) is not None
            }
            for condition in conditions(job)
        ],
        # When the job was created: the start of its time queued (``usage.job_usage``).
        "creation_time": metadata.get("creationTimestamp"),
        "start_time": start_time,
        "completion_time": completion_time,
        "duration_seconds": duration,
        "replica_statuses": {
            replica: {counter: counts[counter] for counter in ("active", "succeeded", "failed")}
            for replica, counts in replica_counts(job, kind).items()
        },
        **trainer_status_result(job, kind),
    }


def describe_state(job: Mapping[str, Any], kind: JobKind, state: JobState) -> str:
    """One line for the task log: the state and the newest condition's reason and message.

    ``state``: the job's ``job_state``, as the caller's one look at it read it (``JobView.describe``).
    """
    # The condition the state was read from, so a Running set after Failed cannot explain a failure.
    newest = _deciding_condition(job, kind)
    said = state.value
    if held_by_kueue(job):
        # Suspended by Kueue until its quota admits it: waiting in a queue, not stuck.
        said = describe_hold(job)
    if not newest and kind.status.running_counters and (counts := replica_counts(job, kind)):
        # A TrainJob has no condition while it runs: its replicated jobs' counters say what there is.
        jobs = ", ".join(f"{name}: {c['ready']} ready, {c['active']} active" for name, c in sorted(counts.items()))
        return f"{said} ({jobs})"
    if not newest:
        return f"{said} (no conditions yet)"
    detail = ": ".join(part for part in (newest.get("reason"), newest.get("message")) if part)
    return f"{said} ({newest.get('type')}{' - ' + detail if detail else ''})"
