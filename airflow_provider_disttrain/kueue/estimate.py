"""When a job Kueue holds may start: its place in its ClusterQueue over the rate Kueue admits there (pure).

The rate is what the provider sees: the Workloads of the job's namespace that Kueue admitted through
the same ClusterQueue in the last ``WINDOW_SECONDS`` (their ``Admitted`` condition's lastTransitionTime;
a finished Workload keeps ``Admitted=True``, so a job that ran and ended still counts). The waiters
already read those Workloads (the triggerer's shared watch of the namespace's Workloads, the worker's
LIST of them every ``POSITION_REFRESH_SECONDS``); ``AdmissionLog`` keeps what they saw, bounded in age
(the window) and in count (``MAX_ADMISSIONS`` per ClusterQueue, ``MAX_CLUSTER_QUEUES`` queues).

A pending Workload names its LocalQueue (``spec.queueName``) but not its ClusterQueue, which only an
admission writes (``status.admission.clusterQueue``): the ClusterQueue of a LocalQueue is learnt from
its Workloads that were admitted, so reading no LocalQueue or ClusterQueue object takes no extra verb.

The estimate is (position in the ClusterQueue, 1 for the next) x (window / admissions in the window):
the jobs ahead and the job itself each need one admission, at the average pace of the window. With
fewer than ``MIN_ADMISSIONS`` in the window the pace says nothing, so no number is given, only why.
It is a pace, not a promise: a higher-priority job arriving, a job ahead finishing early, or quota
borrowed from a cohort moves the start; the explanation says what it was computed from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import cachetools

from airflow_provider_disttrain.kube.conditions import condition, is_true, parse_time
from airflow_provider_disttrain.kueue.position import QueuePosition, duration_text

WINDOW_SECONDS = 1800.0
"""The admissions of the last 30 minutes make the rate (older ones are forgotten)."""
MIN_ADMISSIONS = 3
"""Fewer admissions than this in the window: too little history for an estimate."""
MAX_ADMISSIONS = 200
"""Admissions kept per ClusterQueue (the newest): 200 in 30 min is one every 9 s, pace enough."""
MAX_CLUSTER_QUEUES = 64
"""ClusterQueues (and LocalQueues) kept per log; the least recently seen go first."""


@dataclass(frozen=True, slots=True)
class WaitEstimate:
    """How long a held job may wait: its place, the estimate (None: too little to say) and how it was made."""

    position: int | None
    """Its place in its ClusterQueue, 1 for the next (None: not known)."""
    estimate_seconds: float | None
    explanation: str

    def as_json(self) -> dict[str, Any]:
        """The UI's ``wait`` object (the issue 29 data contract)."""
        return {"position": self.position, "estimate_seconds": self.estimate_seconds, "explanation": self.explanation}

    def describe(self) -> str:
        """For a log line: ``estimated start: <explanation>`` or ``no start estimate: <why>``."""
        return f"{'no start estimate' if self.estimate_seconds is None else 'estimated start'}: {self.explanation}"


def admission(workload: Mapping[str, Any]) -> tuple[str, float] | None:
    """``(ClusterQueue, epoch seconds)`` of a Workload Kueue admitted (finished ones too), else None."""
    admitted = condition(workload, "Admitted")
    cluster_queue = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
    if admitted is None or not is_true(admitted) or not cluster_queue:
        return None
    at = parse_time(admitted.get("lastTransitionTime"))
    return (str(cluster_queue), at.timestamp()) if at is not None else None


class AdmissionLog:
    """The admissions one waiter has seen, per ClusterQueue, and each LocalQueue's ClusterQueue.

    Keyed by the Workload's uid, so a Workload seen again (each watch event, each LIST) counts once.
    Bounded: at most ``max_admissions`` newest per ClusterQueue, at most ``max_queues`` queues of each
    map (LRU); admissions older than the window are dropped when a queue is read.
    """

    def __init__(
        self,
        *,
        window: float = WINDOW_SECONDS,
        max_admissions: int = MAX_ADMISSIONS,
        max_queues: int = MAX_CLUSTER_QUEUES,
    ) -> None:
        self.window = window
        self.max_admissions = max_admissions
        self._admissions: cachetools.LRUCache[str, dict[str, float]] = cachetools.LRUCache(maxsize=max_queues)
        self._cluster_queues: cachetools.LRUCache[str, str] = cachetools.LRUCache(maxsize=max_queues)

    def see(self, workload: Mapping[str, Any]) -> None:
        """Take one Workload as the API server returned it (a LIST's item or a watch event's object)."""
        found = admission(workload)
        if found is None:
            return
        cluster_queue, at = found
        if local_queue := (workload.get("spec") or {}).get("queueName"):
            self._cluster_queues[str(local_queue)] = cluster_queue
        uid = str((workload.get("metadata") or {}).get("uid") or (workload.get("metadata") or {}).get("name"))
        times = self._admissions.get(cluster_queue)
        if times is None:
            times = self._admissions[cluster_queue] = {}
        times[uid] = at
        if len(times) > self.max_admissions:
            del times[min(times, key=times.__getitem__)]

    def see_all(self, workloads: Iterable[Mapping[str, Any]]) -> None:
        for workload in workloads:
            self.see(workload)

    def cluster_queue_of(self, local_queue: str) -> str | None:
        return self._cluster_queues.get(local_queue)

    def admissions(self, cluster_queue: str, now: float) -> list[float]:
        """The admission times in ``cluster_queue`` within the window before ``now``."""
        times = self._admissions.get(cluster_queue) or {}
        self._trim(times, now)
        return sorted(times.values())

    def estimate(self, local_queue: str, position: QueuePosition | None, now: float) -> WaitEstimate:
        """The wait of a job pending in ``local_queue`` at ``position`` (None: not known)."""
        cluster_queue = self.cluster_queue_of(local_queue)
        return estimate_wait(
            position.cluster_queue_position + 1 if position is not None else None,
            cluster_queue,
            self.admissions(cluster_queue, now) if cluster_queue is not None else [],
            now,
            local_queue=local_queue,
            window=self.window,
        )

    def _trim(self, times: dict[str, float], now: float) -> None:
        for uid in [uid for uid, at in times.items() if at < now - self.window]:
            del times[uid]


def estimate_wait(
    position: int | None,
    cluster_queue: str | None,
    admitted_at: Iterable[float],
    now: float,
    *,
    local_queue: str,
    window: float = WINDOW_SECONDS,
    min_admissions: int = MIN_ADMISSIONS,
) -> WaitEstimate:
    """The estimate for a job at ``position`` (1 for the next; None: unknown) in ``cluster_queue`` (None:
    no Workload of ``local_queue`` seen admitted), from the admission times seen there (epoch seconds).

    Admissions at most ``window`` seconds before ``now`` count (one exactly at the edge does); one
    stamped after ``now`` counts too (the API server's clock may be ahead of this host's).
    """
    minutes = duration_text(window)
    if position is None:
        return WaitEstimate(None, None, "its place in the queue is not known (Kueue's visibility API did not say)")
    where = f"position {position} in {f'ClusterQueue {cluster_queue}' if cluster_queue else 'its ClusterQueue'}"
    if cluster_queue is None:
        return WaitEstimate(
            position,
            None,
            f"{where}; no job of LocalQueue {local_queue!r} seen admitted in the last {minutes}, so neither its "
            "ClusterQueue nor its admission rate is known",
        )
    count = sum(1 for at in admitted_at if at >= now - window)
    if count < min_admissions:
        seen = "no admission" if count == 0 else f"only {count} admission{'s' if count > 1 else ''}"
        return WaitEstimate(
            position,
            None,
            f"{where}; {seen} there in the last {minutes} (at least {min_admissions} make an estimate): "
            "too little history to say",
        )
    interval = window / count
    seconds = position * interval
    return WaitEstimate(
        position,
        seconds,
        f"{where}; {count} admissions there in the last {minutes}, about one every {duration_text(interval)}: "
        f"about {duration_text(seconds)}",
    )
