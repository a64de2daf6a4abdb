"""When a wait for a job is over by time: the startup, queue and execution deadlines as one value.

A ``Deadlines`` is frozen and holds absolute epoch seconds, so it travels as it is in a trigger's
kwargs and a resumed trigger keeps it. Every deadline is counted on one clock, the worker's wall
clock that made the value (``now``, injected): the startup and queue deadlines from the moment this
task instance first submitted the job (an earlier try's moment when a retry takes the job over), the
execution deadline from the task's start. The API server's ``creationTimestamp`` is used only for a
job no try of this task recorded submitting, as the one record of its age there is.

The sync wait, the sensor and the trigger judge a job with ``check`` and sleep with ``seconds_left``:
both are ``outcome.check_job``/``outcome.seconds_to_deadline`` with these deadlines filled in; the wait
loops call their forms over one observation of the job (``job.view.JobView``), ``judge`` and ``wake_in``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_provider_disttrain.job.outcome import JobRef, check_job, check_view, seconds_to_deadline
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kube.conditions import parse_time
from airflow_provider_disttrain.kueue.admission import NeverAdmitted

# Airflow 3 (through 3.3) does not time a deferred task out by its execution_timeout: the execution API
# sets the deferral's trigger_timeout only from the ``timeout`` given to ``defer``. The trigger enforces
# execution_timeout (its execution deadline); the deferral timeout, this much later, is a backstop for a
# trigger that never reports (triggerer down), so the job is still deleted. The scheduler looks for
# timed-out deferrals every [scheduler] trigger_timeout_check_interval (15 s by default).
DEFERRAL_BACKSTOP = timedelta(minutes=2)


@dataclass(frozen=True)
class Deadlines:
    """Absolute epoch seconds by which the job must have started, been admitted by Kueue, and finished.

    ``None`` means no such limit. ``startup`` applies until the job first runs (Kueue's wait for an
    admission does not count: ``outcome.startup_deadline_for``), ``queue`` until Kueue first admits it,
    ``execution`` always.
    """

    startup: float | None = None
    queue: float | None = None
    execution: float | None = None

    @classmethod
    def for_job(
        cls,
        job: Mapping[str, Any],
        *,
        submitted_at: float | None,
        startup_timeout: float | None,
        queue_timeout: float | None,
        execution_timeout: timedelta | None,
        task_started_at: datetime | None,
        now: float,
    ) -> Deadlines:
        """The deadlines of a task's wait for ``job``.

        ``submitted_at``: when (on the worker's clock) this task instance submitted the job, if a try
        recorded it; else the job's age comes from its ``creationTimestamp``, else it is new (``now``).
        """
        counted_from = submitted_at if submitted_at is not None else job_created_at(job, default=now)
        started = task_started_at.timestamp() if task_started_at is not None else now
        return cls(
            startup=None if startup_timeout is None else counted_from + startup_timeout,
            queue=None if queue_timeout is None else counted_from + queue_timeout,
            execution=None if execution_timeout is None else started + execution_timeout.total_seconds(),
        )

    @classmethod
    def within(cls, timeout: timedelta | float | None, *, now: float) -> Deadlines:
        """Only an execution deadline ``timeout`` from ``now`` (a sensor's ``timeout``)."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        return cls(execution=now + float(seconds) if seconds else None)

    def check(
        self,
        ref: JobRef,
        job: Mapping[str, Any] | None,
        *,
        now: float,
        has_run: bool = False,
        waiting_reason: str | None = None,
        never_admitted: NeverAdmitted | None = None,
    ) -> dict[str, Any] | None:
        """The outcome if the wait is over (finished, gone, Kueue will never admit it, or past a deadline
        that applies), else None."""
        return check_job(
            ref,
            job,
            now=now,
            startup_deadline=self.startup,
            queue_deadline=self.queue,
            execution_deadline=self.execution,
            has_run=has_run,
            waiting_reason=waiting_reason,
            never_admitted=never_admitted,
        )

    def judge(self, view: JobView, *, now: float) -> dict[str, Any] | None:
        """``check`` of one observation of the job (``JobView``): what the wait loops call."""
        return check_view(
            view, now=now, startup_deadline=self.startup, queue_deadline=self.queue, execution_deadline=self.execution
        )

    def wake_in(self, view: JobView | None, *, now: float) -> float | None:
        """``seconds_left`` for one observation of the job (None: no look at it yet)."""
        if view is None:
            return self.seconds_left(None, now=now, job=None)
        return self.seconds_left(view.state, now=now, job=view.job, has_run=view.has_run)

    def seconds_left(
        self, state: JobState | None, *, now: float, job: Mapping[str, Any] | None, has_run: bool = False
    ) -> float | None:
        """How long a waiter may sleep before a deadline that applies to the job passes (None: no limit)."""
        return seconds_to_deadline(
            state,
            now=now,
            job=job,
            has_run=has_run,
            startup_deadline=self.startup,
            queue_deadline=self.queue,
            execution_deadline=self.execution,
        )

    def deferral_timeout(self, *, now: float, backstop: timedelta = DEFERRAL_BACKSTOP) -> timedelta | None:
        """The scheduler's deferral timeout: ``backstop`` after the execution deadline (None without one)."""
        if self.execution is None:
            return None
        return timedelta(seconds=max(0.0, self.execution - now)) + backstop


def job_created_at(job: Mapping[str, Any], *, default: float) -> float:
    created = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
    return created.timestamp() if created is not None else default
