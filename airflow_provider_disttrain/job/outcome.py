"""Deciding, from one look at a job, whether the wait is over and how it ended.

Shared by the synchronous wait loop, the sensor and the trigger, so that deferrable and sync mode
end in the same way for the same job. An outcome is a JSON-safe dict (it travels as a trigger event):
``{"status": "success" | "failed" | "timeout" | "inadmissible" | "lost_contact" | "error", "kind", "name",
"namespace", "state", "message", "job"}`` where ``job`` is the ``job_result`` summary (or None when the job
is gone). ``inadmissible``: Kueue said it can never admit the job (``kueue_admission``), so it never ran.
``lost_contact``: the API server could not be reached for longer than ``api_failure_tolerance``; ``job``
and ``state`` are the last look at the job, which says nothing of how it is doing now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, replace
from datetime import datetime, timezone
from typing import Any

from airflow_provider_disttrain.job.kinds import kind_of
from airflow_provider_disttrain.job.status import JobState, has_run
from airflow_provider_disttrain.job.view import JobRef, JobView
from airflow_provider_disttrain.kueue.admission import NeverAdmitted
from airflow_provider_disttrain.kueue.hold import held_by_kueue, startup_clock_shift

SUCCESS = "success"
FAILED = "failed"
TIMEOUT = "timeout"
INADMISSIBLE = "inadmissible"
LOST_CONTACT = "lost_contact"
ERROR = "error"
STATUSES = (SUCCESS, FAILED, TIMEOUT, INADMISSIBLE, LOST_CONTACT, ERROR)


@dataclass(frozen=True)
class Outcome:
    """How a wait for a job ended: one schema for the trigger's event and the task's reading of it.

    ``state`` and ``job`` (the ``job_result`` summary) are the last look at the job, None when there
    was none (it is gone, or was never read).
    """

    status: str
    kind: str
    name: str
    namespace: str
    message: str
    state: str | None = None
    job: Mapping[str, Any] | None = None
    pods: Sequence[Mapping[str, Any]] | None = None
    """The job's pods as a watch kept them while it ran (``pods.snapshot``, trimmed and bounded), for a
    job whose pods the cluster deletes before the wait ends (MultiKueue's worker); None: none kept."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"outcome status: {self.status!r} is not one of {', '.join(STATUSES)}")

    @property
    def ref(self) -> JobRef:
        """The job the wait was about, with the uid its last look read."""
        return JobRef(self.kind, self.name, self.namespace, (self.job or {}).get("uid"))

    def to_event(self) -> dict[str, Any]:
        """The JSON-safe dict a trigger event carries (and Airflow stores) for this outcome."""
        return {
            "status": self.status,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "state": self.state,
            "message": self.message,
            "job": dict(self.job) if self.job is not None else None,
            # Only when kept: an older task reading this event ignores a key it does not know.
            **({"pods": [dict(pod) for pod in self.pods]} if self.pods else {}),
        }

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Outcome:
        """The outcome a trigger event carries. Keys a newer provider version may add are ignored (a
        rolling upgrade: a newer triggerer fired); one this version needs and the event lacks is refused
        by name, as is a status it does not know."""
        known = {field.name: field for field in fields(cls)}
        required = [name for name, field in known.items() if field.default is MISSING]
        if missing := [name for name in required if name not in event]:
            raise ValueError(f"trigger event: missing {', '.join(missing)} (got keys {sorted(event)})")
        return cls(**{name: event[name] for name in known if name in event})


def make_outcome(ref: JobRef, status: str, message: str, job: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return conclude(JobView.observe(ref, job or None), status, message)


def conclude(view: JobView, status: str, message: str) -> dict[str, Any]:
    """The outcome ``status`` of the wait for ``view``'s job, with its last look at the job, as an event."""
    return concluded(view, status, message).to_event()


def concluded(view: JobView, status: str, message: str) -> Outcome:
    """The outcome ``status`` of the wait for ``view``'s job, with its last look at the job."""
    ref, job = view.ref, view.job
    return Outcome(
        status,
        ref.kind,
        ref.name,
        ref.namespace,
        message,
        state=view.state.value if view.state is not None else None,
        job=view.result() if job else None,
    )


_NOT_STARTED_STATES = (None, JobState.QUEUED, JobState.SUSPENDED)


def startup_deadline_for(job: Mapping[str, Any] | None, startup_deadline: float | None) -> float | None:
    """The startup deadline that applies to ``job``: time spent waiting for Kueue does not count.

    ``startup_deadline`` is counted from the job's creation (it travels as absolute epoch seconds, so
    serialized triggers keep it); a job Kueue held has it moved by the time it waited until admission,
    and none applies while Kueue still holds it (``kueue.startup_clock_shift``).
    """
    if startup_deadline is None or job is None:
        return startup_deadline
    shift = startup_clock_shift(job)
    return None if shift is None else startup_deadline + shift


def queue_deadline_applies(job: Mapping[str, Any] | None, ran: bool) -> bool:
    """``queue_timeout`` bounds only the wait for a first admission: Kueue holds the job, which never ran."""
    # Its own lookup: ``seconds_to_deadline`` is given a bare job (``Deadlines.seconds_left``); the wait
    # loops' ``JobView`` has read ``has_run`` into ``ran`` already.
    return job is not None and held_by_kueue(job) and not (ran or has_run(job, kind_of(job)))


def _last_state(view: JobView) -> str:
    described = view.describe()
    return f"{described}; Kueue: {view.waiting_reason}" if view.waiting_reason else described


def lost_contact(
    ref: JobRef, job: Mapping[str, Any] | None, *, waited: float, last_contact: float, error: str
) -> dict[str, Any]:
    """The wait could not reach the API server for ``waited`` seconds (``error``: the last failure);
    ``job`` is the last look at the job, taken by ``last_contact`` (epoch seconds)."""
    at = datetime.fromtimestamp(last_contact, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    view = JobView.observe(ref, job or None)
    seen = f"was last seen {view.describe()} at {at}" if job else f"had not been read yet at {at}"
    return conclude(
        view,
        LOST_CONTACT,
        f"lost contact with the API server for {waited:.0f}s while waiting for {ref.title} ({error}); the job {seen}",
    )


def job_gone(ref: JobRef) -> dict[str, Any]:
    return make_outcome(ref, ERROR, f"{ref.title} no longer exists: it was deleted outside this task")


def check_job(
    ref: JobRef,
    job: Mapping[str, Any] | None,
    *,
    now: float,
    startup_deadline: float | None = None,
    execution_deadline: float | None = None,
    has_run: bool = False,
    queue_deadline: float | None = None,
    waiting_reason: str | None = None,
    never_admitted: NeverAdmitted | None = None,
) -> dict[str, Any] | None:
    """The outcome if the wait is over (finished, replaced, gone or past a deadline), else None.

    ``startup_deadline`` only applies until the job first runs: while it is queued, or suspended
    without having run (held by a queueing system). A job suspended after it ran is waited for, bounded
    by ``execution_deadline``, which always applies. ``has_run``: the caller saw it run (a suspended
    MPIJob's conditions do not tell). For a job Kueue holds, the startup clock starts at its admission
    (``startup_deadline_for``) and ``queue_deadline`` bounds the wait for that admission;
    ``waiting_reason`` (the Workload's message) goes into a timeout's message. ``never_admitted``
    (``kueue_admission.never_admitted`` of the job's Workload) ends the wait for a first admission at
    once: Kueue said it never will, so waiting would only end at ``queue_timeout``.
    """
    view = JobView.observe(ref, job, waiting_reason=waiting_reason, never_admitted=never_admitted)
    view = replace(view, has_run=True) if has_run and not view.has_run else view
    return check_view(
        view,
        now=now,
        startup_deadline=startup_deadline,
        execution_deadline=execution_deadline,
        queue_deadline=queue_deadline,
    )


def check_view(
    view: JobView,
    *,
    now: float,
    startup_deadline: float | None = None,
    execution_deadline: float | None = None,
    queue_deadline: float | None = None,
) -> dict[str, Any] | None:
    """``check_job`` of one observation: the outcome if the wait for ``view``'s job is over, else None."""
    ref, job, state = view.ref, view.job, view.state
    if job is None or state is None:
        return job_gone(ref)
    if ref.uid and view.uid and view.uid != ref.uid:
        return conclude(
            view,
            ERROR,
            f"{ref.title} was deleted and recreated outside this task (uid {view.uid}, expected {ref.uid})",
        )
    if state is JobState.SUCCEEDED:
        return conclude(view, SUCCESS, f"{ref.title} succeeded")
    if state is JobState.FAILED:
        return conclude(view, FAILED, f"{ref.title} failed: {view.describe()}")
    awaits_admission = view.hold is not None and not view.has_run  # ``queue_deadline_applies``
    if view.never_admitted is not None and awaits_admission:
        return conclude(view, INADMISSIBLE, f"{ref.title} was not admitted: {view.never_admitted.describe()}")
    if execution_deadline is not None and now >= execution_deadline:
        return conclude(
            view,
            TIMEOUT,
            f"{ref.title} did not finish within the task's execution_timeout; last state: {_last_state(view)}",
        )
    if queue_deadline is not None and now >= queue_deadline and awaits_admission:
        return conclude(
            view,
            TIMEOUT,
            f"{ref.title} was not admitted by Kueue within queue_timeout; last state: {_last_state(view)}",
        )
    startup_deadline = startup_deadline_for(job, startup_deadline)
    if startup_deadline is not None and now >= startup_deadline and state in _NOT_STARTED_STATES and not view.has_run:
        return conclude(
            view, TIMEOUT, f"{ref.title} did not start within startup_timeout; last state: {view.describe()}"
        )
    return None


def seconds_to_deadline(
    state: JobState | None,
    *,
    now: float,
    startup_deadline: float | None = None,
    execution_deadline: float | None = None,
    has_run: bool = False,
    job: Mapping[str, Any] | None = None,
    queue_deadline: float | None = None,
) -> float | None:
    """How long a waiter may sleep before a deadline that applies to ``state`` passes.

    Given the ``job``, the Kueue rules of ``check_job`` apply: the startup deadline moved by the time
    spent waiting for admission (none while waiting), and ``queue_deadline`` while Kueue holds it.
    """
    deadlines = [execution_deadline]
    if state in _NOT_STARTED_STATES and not has_run:
        deadlines.append(startup_deadline_for(job, startup_deadline))
    if queue_deadline_applies(job, has_run):
        deadlines.append(queue_deadline)
    remaining = [deadline - now for deadline in deadlines if deadline is not None]
    return max(min(remaining), 0.0) if remaining else None


def same_job(ref: JobRef, job: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """``job`` (a read by name) when it is the job ``ref`` names: of its uid, when ``ref`` has one.

    None otherwise: the name holds a job created since (another run's, a person's copy), and the one
    this wait is about is gone. Nothing of the other may end this task: its state, result or logs.
    """
    if job is None or ref.uid is None or (job.get("metadata") or {}).get("uid") == ref.uid:
        return job
    return None


def settle_timeout(ref: JobRef, outcome: Outcome, job: Mapping[str, Any] | None) -> Outcome:
    """A timeout ``outcome`` judged on an older look at the job, settled by a fresh look (``job``).

    A trigger's cache can lag behind the job (a silent watch): a job that has finished since ends the
    task as it finished, not as a timeout, so it is neither reported as timed out nor deleted for it.
    Any other outcome, or a job still unfinished, gone, or another under the same name (``same_job``),
    is returned as it is (the same object).
    """
    view = JobView.observe(ref, same_job(ref, job))
    if outcome.status != TIMEOUT or view.job is None or not view.is_terminal:
        return outcome
    if view.state is JobState.SUCCEEDED:
        return concluded(view, SUCCESS, f"{ref.title} succeeded")
    return concluded(view, FAILED, f"{ref.title} failed: {view.describe()}")
