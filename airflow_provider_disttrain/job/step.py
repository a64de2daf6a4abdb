"""The wait's one move, written once: a look at the job in, its outcome or the time to look again out.

Both waits are drivers around ``step``: the sync poll (``operators.waiting.poll_until_over``) reads the
job and sleeps; the trigger (``triggers.training_job``) is woken by the shared watch. Each owns only
its I/O (reads, the log, Kueue, the controller's refusals, outages); what the deadlines make of a look
at the job is decided here, pure, on the time it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_provider_disttrain.job.deadlines import Deadlines
    from airflow_provider_disttrain.job.view import JobView


@dataclass(frozen=True)
class Wake:
    """The wait is not over: look again by ``at`` (epoch seconds) even if nothing changes; None: only
    when the job changes (no deadline applies)."""

    at: float | None

    def seconds_from(self, now: float) -> float | None:
        """Seconds from ``now`` until ``at`` (0 once it passed); None without a deadline."""
        return None if self.at is None else max(self.at - now, 0.0)


def step(view: JobView, deadlines: Deadlines, now: float) -> dict[str, Any] | Wake:
    """The outcome (``outcome.Outcome.to_event()``) if the look ``view`` ends the wait at ``now``, else when
    the next deadline that applies to it passes."""
    if (outcome := deadlines.judge(view, now=now)) is not None:
        return outcome
    return next_wake(view, deadlines, now)


def next_wake(view: JobView | None, deadlines: Deadlines, now: float) -> Wake:
    """When the next deadline that applies to ``view`` passes (None: no look at the job yet)."""
    seconds = deadlines.wake_in(view, now=now)
    return Wake(None if seconds is None else now + seconds)
