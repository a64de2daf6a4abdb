"""What Kueue's objects say about a job that waits, once for both waiters (pure).

A worker that polls (``hooks.kueue``: ``KueueWaitReporter``, ``QueuePositionReader``) and the triggerer
that follows a watch (``hooks.workload_follower``, ``hooks.queue_positions``) read the same things the
same way: what a Workload says (Kueue's reason, its word that it never admits the job, whether its
place in the queue is worth asking for), what a visibility answer means (the positions, a malformed
answer skipped, a refusal for good), what to say (the warnings) and when to ask again. They differ only
in how they ask: sync hook calls or an async watch and poller. Their errors arrive here as an HTTP
status and a description (``hooks.api_errors``), so this module reads no client's exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_disttrain.kube.conditions import parse_time
from airflow_provider_disttrain.kueue.admission import NeverAdmitted, never_admitted
from airflow_provider_disttrain.kueue.estimate import WaitEstimate
from airflow_provider_disttrain.kueue.hold import is_admitted, waiting_message
from airflow_provider_disttrain.kueue.position import MalformedAnswer, QueuePosition, positions

WORKLOAD_UNREADABLE = (401, 403, 404)
"""401/403: the Role lacks list on workloads.kueue.x-k8s.io; 404: Kueue's CRD is not installed."""
VISIBILITY_UNAVAILABLE = (401, 403, 404, 503)
"""401/403: the Role lacks get on localqueues/pendingworkloads in visibility.kueue.x-k8s.io; 404: the API
is not served (Kueue older than v0.9, VisibilityOnDemand off); 503: its APIService is registered but
Kueue's visibility server does not answer."""
POSITION_REFRESH_SECONDS = 30.0
"""How often a LocalQueue's positions are asked for (at most; once for all the jobs waiting in it)."""


def workload_unreadable_warning(title: str, error: str) -> str:
    return (
        f"{title} is queued by Kueue, but its Workload cannot be read ({error}): the Role needs list and watch "
        "on workloads.kueue.x-k8s.io to say why it waits"
    )


def visibility_unavailable_warning(namespace: str, local_queue: str, error: str) -> str:
    return (
        f"Kueue's queue positions for LocalQueue {namespace}/{local_queue} cannot be read "
        f"({error}): the Role needs get on localqueues/pendingworkloads in "
        "visibility.kueue.x-k8s.io, and Kueue's visibility API must be served (VisibilityOnDemand); the task "
        "says why the job waits without its position"
    )


def malformed_answer_warning(namespace: str, local_queue: str, error: MalformedAnswer, refresh_seconds: float) -> str:
    return (
        f"Kueue's visibility API answered something that is not a PendingWorkloadsSummary for LocalQueue "
        f"{namespace}/{local_queue} ({error}): skipped; the last positions stay and it is asked again in "
        f"{refresh_seconds:.0f} s"
    )


def waited_seconds(workload: Mapping[str, Any], now: float) -> float | None:
    """How long the Workload has been pending: since it was created (the job's submission)."""
    created = parse_time((workload.get("metadata") or {}).get("creationTimestamp"))
    return None if created is None else max(0.0, now - created.timestamp())


def position_wanted(workload: Mapping[str, Any] | None) -> str | None:
    """The Workload's name when its place in the queue is worth asking for: Kueue holds it with a reason,
    has not admitted it, and has not said it never will. None otherwise (no request is made)."""
    if workload is None or not waiting_message(workload) or is_admitted(workload) or never_admitted(workload):
        return None
    name = (workload.get("metadata") or {}).get("name")
    return str(name) if name else None


@dataclass(frozen=True, slots=True)
class KueueWord:
    """What Kueue says about a job it holds, from one look at its Workload (and its place in the queue)."""

    message: str | None
    """Kueue's reason the job waits, with its place in the queue when known; None once admitted."""
    never_admitted: NeverAdmitted | None
    """Kueue's word that it can never admit the job (``kueue.admission``)."""
    said: tuple[str, int | None, int | None] | None
    """What a log line compares with the last one: the reason and the place, not the time waited."""
    wait: WaitEstimate | None = None
    """When the job may start (``kueue.estimate``), while Kueue holds it and its place is asked for."""


NOTHING = KueueWord(None, None, None)
"""The word on a job Kueue does not hold (or whose Workload cannot be read)."""


def kueue_word(
    workload: Mapping[str, Any] | None,
    position: QueuePosition | None,
    *,
    waited: float | None = None,
    wait: WaitEstimate | None = None,
) -> KueueWord:
    """Kueue's word on a held job from its Workload (None: not created yet) and its place in the queue.

    ``waited``: the seconds since the Workload was created, for a line written once (a line the
    triggerer compares with its last one leaves it out, so that it changes only when the job moves).
    ``wait``: the estimate of its start (``AdmissionLog.estimate``), said after its place when it has one.
    """
    reason = waiting_message(workload)
    message = reason
    if reason and position is not None and workload is not None:
        created = (workload.get("metadata") or {}).get("creationTimestamp")
        message = f"{reason}; {position.describe(since=created, waited_seconds=waited)}"
    if message and wait is not None and wait.position is not None:  # unplaced: the line says nothing of it
        message = f"{message}; {wait.describe()}"
    at = (position.in_local_queue, position.cluster_queue_position) if position is not None else (None, None)
    return KueueWord(message, never_admitted(workload), (reason, *at) if reason else None, wait if reason else None)


@dataclass
class PositionBook:
    """One LocalQueue's positions as the last good visibility answer gave them, and when to ask again.

    An answer that is not a ``PendingWorkloadsSummary`` is skipped (the last positions stay), warned
    about once until a good one comes; a refusal for good (``VISIBILITY_UNAVAILABLE``) stops the asking.
    """

    namespace: str
    local_queue: str
    refresh_seconds: float = POSITION_REFRESH_SECONDS
    unavailable: bool = False
    malformed: bool = False
    """The last answer was malformed (said once until a good answer comes)."""
    asked_at: float | None = None
    positions: dict[str, QueuePosition] = field(default_factory=dict)

    def due(self, now: float) -> bool:
        """Whether to ask now (monotonic seconds): never once refused, else once per ``refresh_seconds``."""
        if self.unavailable:
            return False
        return self.asked_at is None or now - self.asked_at >= self.refresh_seconds

    def asking(self, now: float) -> None:
        self.asked_at = now

    def answered(self, summary: Mapping[str, Any]) -> tuple[set[str], str | None]:
        """Take an answer: the names whose position changed, and a warning to log (a malformed answer)."""
        try:
            fresh = positions(self.local_queue, summary)
        except MalformedAnswer as error:
            warning = None if self.malformed else self._malformed(error)
            self.malformed = True
            return set(), warning
        self.malformed = False
        old, self.positions = self.positions, fresh
        return {name for name in old.keys() | fresh.keys() if old.get(name) != fresh.get(name)}, None

    def failed(self, status: int | None, error: str) -> str | None:
        """Take a failed request: the warning when the API refused for good (asked no more), else None
        (an outage: the last positions stay; the driver decides whether to raise or try again)."""
        if status not in VISIBILITY_UNAVAILABLE:
            return None
        self.unavailable = True
        return visibility_unavailable_warning(self.namespace, self.local_queue, error)

    def _malformed(self, error: MalformedAnswer) -> str:
        return malformed_answer_warning(self.namespace, self.local_queue, error, self.refresh_seconds)
