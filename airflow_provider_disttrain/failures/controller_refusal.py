"""A job its controller refused without a word in its status, found in the controller's Warning event.

The mpi-operator validates an MPIJob in its controller, not in an admission webhook: an invalid one gets
a Warning event (``ValidationError``, "Found validation errors: ...") and never a condition, so a wait that
reads only the job sits until its startup timeout and cannot say why. The waits (the sync poll, the
trigger) therefore read the job's Warning events while it has no condition yet, at most every
``LOOK_EVERY_SECONDS`` (one LIST, selected by the API server), and end the wait with the event's own
words. A healthy job gets its first condition within a second of its creation, so it costs at most a
look or two. Which reasons are refusals is the kind's (``JobKind.refusal_event_reasons``). Pure but for
``read_refusal``, which reads through the hook it is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.job.outcome import FAILED, JobRef, make_outcome

LOOK_EVERY_SECONDS = 10.0
"""At most one look at a job's Warning events this often, and only while it has no condition."""


def warning_events_selector(name: str) -> str:
    """The field selector of the Warning events about the object ``name`` (a field selector has no "or")."""
    return f"type=Warning,involvedObject.name={name}"


def awaits_controller(kind: JobKind, job: Mapping[str, Any] | None) -> bool:
    """Whether ``job`` may be one its controller refused: the kind refuses by event, and it has no condition."""
    return bool(kind.refusal_event_reasons) and job is not None and not (job.get("status") or {}).get("conditions")


def refusal(kind: JobKind, job: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> str | None:
    """``reason: message`` of the newest refusal among ``events`` about this very job, else None.

    Only an event whose involved object is this job by kind and uid counts: a job deleted and created
    again under the same name leaves the old one's events behind (kept for an hour by default).
    """
    uid = (job.get("metadata") or {}).get("uid")
    found = [
        event
        for event in events
        if event.get("reason") in kind.refusal_event_reasons
        and (event.get("involvedObject") or {}).get("kind") == kind.kind
        and (event.get("involvedObject") or {}).get("uid") == uid
    ]
    if not found:
        return None
    newest = max(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return f"{newest.get('reason')}: {str(newest.get('message') or '').strip()}"


def read_refusal(hook: Any, kind: JobKind, ref: JobRef, job: Mapping[str, Any], log: Any) -> str | None:
    """``refusal`` of ``job`` among its Warning events read through a sync hook (``list_warning_events``).
    Events that cannot be read now only delay the answer: the next look is one interval later."""
    try:
        events = hook.list_warning_events(ref.namespace, {ref.name})
    except Exception as error:
        log.warning("Could not read the Warning events of %s: %r", ref.title, error)
        return None
    return refusal(kind, job, events)


def refused(ref: JobRef, job: Mapping[str, Any], words: str) -> dict[str, Any]:
    """The outcome of a wait for a job its controller refused: failed, in the controller's words."""
    return make_outcome(ref, FAILED, f"{ref.title} was refused by its controller and will never run: {words}", job)


class RefusalLooks:
    """When one wait looks at its job's Warning events next (``LOOK_EVERY_SECONDS`` apart, while it has
    no condition)."""

    def __init__(self, kind: JobKind) -> None:
        self.kind = kind
        self._last: float | None = None

    def seconds_until_due(self, job: Mapping[str, Any] | None, now: float) -> float | None:
        """Seconds until the next look is due (0: now); None while there is nothing to look for."""
        if not awaits_controller(self.kind, job):
            return None
        return 0.0 if self._last is None else max(0.0, self._last + LOOK_EVERY_SECONDS - now)

    def due(self, job: Mapping[str, Any] | None, now: float) -> bool:
        """Whether to look now; a True answer counts as the look (a failed one is not tried again sooner)."""
        if self.seconds_until_due(job, now) != 0.0:
            return False
        self._last = now
        return True
