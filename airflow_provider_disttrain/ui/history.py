"""The tab's chart: each job's metrics over time, from what the API server already reads.

The provider keeps only the latest values a trainer reports: a TrainJob's ``status.trainerStatus``
(overwritten at every report, ``trainer_status``) and, once the leader ended, its termination message
(``pods.metrics``). So the API server keeps a short history itself: every time a request of the UI
reads a job (a LIST the shared cache already made for everyone; no request of its own, none per viewer)
the trainer's report is added to that job's series if it is newer than the last point. The series are
bounded: ``MAX_POINTS`` per job (the oldest go first), ``MAX_JOBS`` jobs (the least recently seen go
first), ``MAX_METRICS`` names per point, numbers only. They live in the API-server process's memory:
a restart, or another worker process, starts from the job's latest report (the chart says how many
points it has and where they come from).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import cachetools

from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.trainer_status import metric_value, trainer_progress
from airflow_provider_disttrain.kube.conditions import parse_time
from airflow_provider_disttrain.pods.logs import leader_pods
from airflow_provider_disttrain.pods.metrics import leader_metrics

MAX_POINTS = 500
MAX_JOBS = 256
MAX_METRICS = 16

Point = dict[str, Any]
"""``{"t": epoch seconds, "values": {name: number}}``."""


def _numbers(values: Iterable[tuple[str, Any]]) -> dict[str, float]:
    """The values that are finite numbers (``metric_value``'s reading of a string), at most ``MAX_METRICS``."""
    numbers: dict[str, float] = {}
    for name, value in values:
        number = metric_value(value) if isinstance(value, str) else value
        # Finite only: a termination message's JSON may say Infinity or NaN, which JSON answers cannot carry.
        if isinstance(number, int | float) and not isinstance(number, bool) and math.isfinite(number):
            numbers[str(name)] = float(number)
        if len(numbers) == MAX_METRICS:
            break
    return numbers


def reported_point(job: Mapping[str, Any]) -> Point | None:
    """The trainer's latest report on ``job`` as a point (its ``lastUpdatedTime``); None without one."""
    try:
        kind = get_job_kind(str(job.get("kind")))
    except (KeyError, ValueError):
        return None
    progress = trainer_progress(job, kind)
    when = parse_time(progress.updated) if progress else None
    values = _numbers(progress.metrics) if progress else {}
    return {"t": when.timestamp(), "values": values} if when and values else None


def final_point(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> Point | None:
    """The leader's termination message (its final metrics) as a point at the time it ended."""
    try:
        kind = get_job_kind(str(job.get("kind")))
    except (KeyError, ValueError):
        return None
    pods = list(pods)
    metrics, _ = leader_metrics(kind, pods)
    values = _numbers(metrics.items()) if metrics else {}
    if not values:
        return None
    # When the leader ended: the latest finishedAt of its pods' containers (ISO times compare as text).
    ended = max(
        (
            str(finished)
            for pod in leader_pods(kind, pods)
            for status in (pod.get("status") or {}).get("containerStatuses") or []
            if (finished := ((status.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        ),
        default=None,
    )
    when = parse_time(ended)
    return {"t": when.timestamp(), "values": values} if when else None


class MetricHistory:
    """Bounded series of reported metrics per job (by uid), shared by the requests of one process."""

    def __init__(self, max_jobs: int = MAX_JOBS, max_points: int = MAX_POINTS) -> None:
        self._max_points = max_points
        self._series: cachetools.LRUCache[str, deque[Point]] = cachetools.LRUCache(maxsize=max_jobs)
        self._lock = threading.Lock()

    def record(self, job: Mapping[str, Any]) -> None:
        """Adds the trainer's latest report on ``job`` to its series (once: a report is kept by its time)."""
        uid = (job.get("metadata") or {}).get("uid")
        point = reported_point(job)
        if not uid or point is None:
            return
        with self._lock:
            series = self._series.get(uid)
            if series is None:
                series = self._series[uid] = deque(maxlen=self._max_points)
            if not series or series[-1]["t"] < point["t"]:
                series.append(point)

    def chart(self, job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """What the tab draws: ``{"points": [...] (oldest first), "source": ...}``; the trainer's series (at
        least its latest report) and the leader's final metrics when its termination message has some."""
        uid = (job.get("metadata") or {}).get("uid")
        with self._lock:
            points = list(self._series.get(uid) or ()) if uid else []
        if not points and (latest := reported_point(job)) is not None:
            points = [latest]
        sources = ["the trainer's reports (trainerStatus)"] if points else []
        final = final_point(job, pods)
        if final is not None and (not points or points[-1]["t"] <= final["t"]):
            points.append(final)
            sources.append("the leader's termination message")
        return {"points": points, "source": " and ".join(sources)}
