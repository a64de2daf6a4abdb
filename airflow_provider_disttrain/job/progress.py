"""Progress lines for a job being waited for: one line per meaningful change, throttled.

``ProgressTracker.observe`` is given each view of the job the waiter already has (the trigger's
shared watch, the sync wait's poll) and returns the line to log, or None. A line says the job's
state and its newest condition, the active / succeeded / failed replicas of each replica type (each
replicated job of a TrainJob), why a job that has not started is waiting, and how many restarts were
seen, and what the trainer itself reported (a TrainJob's ``trainerStatus``: percentage, time left,
latest metrics). Pure: no I/O, no clock of its own (``now`` is passed in), a few fields per job, so 1,000
deferred jobs cost nothing measurable between their changes.

Throttling is a token bucket per job: a burst of ``burst`` lines, then one line per ``interval``
seconds. Changes that arrive while the bucket is empty are coalesced into the next line, which says
how many it stands for; a terminal state is always reported at once. ``seconds_until_due`` tells the
waiter when a held-back line may be written, so it can wake for it even if the job stays quiet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.job.status import JobState, has_run
from airflow_provider_disttrain.job.trainer_status import describe_progress
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kube.conditions import conditions
from airflow_provider_disttrain.kueue.hold import held_by_kueue

DEFAULT_PROGRESS_INTERVAL_SECONDS = 30.0
"""A progress line at most every 30 s by default (the operators' ``progress_interval``)."""
DEFAULT_BURST = 3
_UNSCHEDULABLE = "unschedulable"


def replicas_text(view: JobView) -> str:
    """``Master: 1 active; Worker: 2 active, 1 failed`` (zero counters left out), from the job's status."""
    parts = []
    for replica, counts in sorted(view.replicas.items()):
        shown = ", ".join(f"{counts[c]} {c}" for c in ("active", "succeeded", "failed") if counts.get(c))
        parts.append(f"{replica}: {shown or 'none yet'}")
    return "; ".join(parts)


def waiting_text(job: Mapping[str, Any], waiting_reason: str | None) -> str | None:
    """Why a job that has not started waits: the caller's reason (e.g. a queue's), else what its
    conditions say about unschedulable pods; None when nothing says more than the state."""
    if waiting_reason:
        return waiting_reason
    for condition in conditions(job):
        text = f"{condition.get('reason') or ''} {condition.get('message') or ''}"
        if _UNSCHEDULABLE in text.lower():
            return text.strip()
    return None


def _restart_mark(job: Mapping[str, Any]) -> str | None:
    """When the job's Restarting condition last became true (the training-operator sets it on each
    restart of a replica); None while it is not true."""
    for condition in conditions(job):
        if condition.get("type") == "Restarting" and str(condition.get("status")).lower() == "true":
            return str(condition.get("lastTransitionTime") or "")
    return None


def lost_its_admission(view: JobView) -> bool:
    """Whether Kueue took a running job's admission away (preemption, eviction): it is queued again after
    it ran. Said at once, as a terminal state is: held back, the line would be replaced by the next
    "running" before anyone read why the job stopped."""
    # What the job's own conditions say (``status.has_run``), not what earlier views saw: as before views.
    job, kind = view.job, view.kind
    return job is not None and kind is not None and held_by_kueue(job) and has_run(job, kind)


class ProgressTracker:
    """What one waiter has told the log about one job, and when."""

    __slots__ = ("_held", "_pending", "_refilled_at", "_restarts", "_said", "_tokens", "burst", "interval")

    def __init__(self, *, interval: float = DEFAULT_PROGRESS_INTERVAL_SECONDS, burst: int = DEFAULT_BURST) -> None:
        if interval <= 0 or burst < 1:
            raise ValueError(f"progress throttle: expected interval > 0 and burst >= 1, got {interval!r}, {burst!r}")
        self.interval = interval
        self.burst = burst
        self._tokens = float(burst)
        self._refilled_at: float | None = None
        self._said: str | None = None
        self._pending: str | None = None
        self._held = 0
        self._restarts: set[str] = set()

    def observe(self, view: JobView, *, now: float, waiting_reason: str | None = None) -> str | None:
        """The line to log for this view of the job (found), or None (nothing new, or held back by the throttle)."""
        job = view.job or {}
        self._refill(now)
        if (mark := _restart_mark(job)) is not None:
            self._restarts.add(mark)
        line = self._line(view, waiting_reason)
        if line == self._said:
            self._pending, self._held = None, 0  # flapped back to what the log already says
            return None
        if line != self._pending:
            self._held += 1
        self._pending = line
        if self._tokens < 1 and not view.is_terminal and not lost_its_admission(view):
            return None
        self._tokens = max(0.0, self._tokens - 1)
        coalesced = f" ({self._held} changes since the last line)" if self._held > 1 else ""
        self._said, self._pending, self._held = line, None, 0
        return line + coalesced

    def seconds_until_due(self, now: float) -> float | None:
        """Seconds until a held-back line may be written (observe again then); None when none is held."""
        if self._pending is None:
            return None
        self._refill(now)
        return max(0.0, (1 - self._tokens) * self.interval)

    def _refill(self, now: float) -> None:
        if self._refilled_at is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._refilled_at) / self.interval)
        self._refilled_at = now

    def _line(self, view: JobView, waiting_reason: str | None) -> str:
        job = view.job or {}
        parts = [view.describe()]
        if replicas := replicas_text(view):
            parts.append(f"replicas {replicas}")
        if view.state in (JobState.QUEUED, JobState.SUSPENDED) and (waiting := waiting_text(job, waiting_reason)):
            parts.append(f"waiting: {waiting}")
        if self._restarts:
            parts.append(f"restarts seen: {len(self._restarts)}")
        if (reported := view.trainer) is not None:
            parts.append(describe_progress(reported))
        return " | ".join(parts)
