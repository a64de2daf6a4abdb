"""What a job held: its GPUs, the GPU-seconds and wall seconds its pods ran, and the seconds it queued first.

Read from the job's pods as one LIST returns them (pure: no I/O, ``now`` passed in), by the ending of the
sync and the deferred wait alike. A pod holds its GPUs from its first container's start until its last
container's finish (a container restarted in place keeps the pod, so its GPUs, in between); a pod still
running counts until ``now``. The job's running seconds are the time any of its pods ran (the union of
their spans: a pod replaced after a restart does not count the overlap twice); its GPU-seconds are each
pod's GPUs (``gpus.gpus_of_pod``, its containers' GPU limits) times the pod's span.

Only the pods still listed count: a pod the operator deleted and replaced (``restartPolicy: ExitCode``,
a Kueue eviction) is gone with its times, so the figures are a lower bound for such a job. ``None`` says
"cannot tell": no pod was listed (the listing failed, or the pods were cleaned up), or a pod's container
ran but the API gives no time for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_disttrain.job.gpus import gpus_of_pod
from airflow_provider_disttrain.kube.conditions import parse_time

USAGE_ANNOTATION = "disttrain.airflow.apache.org/usage"
"""Where the operator records a finished job's usage (JSON of ``Usage.as_dict``), for the jobs page."""

_TERMINAL_PHASES = ("Succeeded", "Failed")


class _Unknown(Exception):
    """A pod ran, but the API does not say when: the job's figures cannot be told."""


@dataclass(frozen=True)
class Usage:
    """What a job held; the ``usage`` object of a task's result (the fields as named there)."""

    gpus: int
    """GPUs of the job's pods (each listed pod's GPU limits, summed)."""
    gpu_seconds: float | None
    running_seconds: float | None
    queued_seconds: float | None
    """From the job's creation until its first pod started (until ``now`` while none has)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe, for the result, XCom, the annotation and the UI."""
        return asdict(self)

    @classmethod
    def from_annotation(cls, value: Any) -> Usage | None:
        """The usage the annotation records; None when there is none or it is not what ``as_dict`` writes
        (the page shows nothing rather than failing on a job someone annotated by hand)."""
        try:
            data = json.loads(value) if isinstance(value, str) else None
            if not isinstance(data, dict) or type(data.get("gpus")) is not int or data["gpus"] < 0:
                return None
            seconds = [data.get(key) for key in ("gpu_seconds", "running_seconds", "queued_seconds")]
            if not all(s is None or (type(s) in (int, float) and s >= 0) for s in seconds):
                return None
            return cls(data["gpus"], *(None if s is None else float(s) for s in seconds))
        except ValueError:
            return None

    def annotation(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))


def _epoch(value: Any) -> float | None:
    parsed = parse_time(value)
    return parsed.timestamp() if parsed is not None else None


def _container_runs(status: Mapping[str, Any]) -> Iterable[tuple[Mapping[str, Any], bool]]:
    """Each run of one container the status tells of: ``(state, running now)``: its current state and the
    last one it terminated in before a restart."""
    state = status.get("state") or {}
    if "running" in state:
        yield state["running"] or {}, True
    if "terminated" in state:
        yield state["terminated"] or {}, False
    if "terminated" in (last := status.get("lastState") or {}):
        yield last["terminated"] or {}, False


def pod_span(pod: Mapping[str, Any], *, now: float) -> tuple[float, float] | None:
    """``(start, end)`` the pod held its resources: its first container's start to its last one's finish, or
    ``now`` while the pod is not over (a container running or waiting to restart). None: it never ran."""
    status = pod.get("status") or {}
    starts: list[float] = []
    ends: list[float] = []
    running = False
    for container in status.get("containerStatuses") or []:
        for state, now_running in _container_runs(container):
            started = _epoch(state.get("startedAt"))
            finished = None if now_running else _epoch(state.get("finishedAt"))
            if started is None or (not now_running and finished is None):
                raise _Unknown(str((pod.get("metadata") or {}).get("name")))
            starts.append(started)
            running = running or now_running
            if finished is not None:
                ends.append(finished)
    if not starts:
        return None
    # Over once the pod is, or once every container's current state is terminated (the kubelet may not
    # have written the pod's phase yet); a container waiting to restart keeps the pod, and its GPUs.
    current = [(c.get("state") or {}) for c in status.get("containerStatuses") or []]
    over = not running and (status.get("phase") in _TERMINAL_PHASES or all("terminated" in s for s in current))
    end = max(ends) if over and ends else now
    return min(starts), max(end, min(starts))


def _union_seconds(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def job_usage(pods: Iterable[Mapping[str, Any]] | None, *, created: Any = None, now: float) -> Usage:
    """What the job whose ``pods`` these are (one LIST; None when it failed) held until ``now``.

    ``created``: the job's ``creationTimestamp`` (the result's ``creation_time``), for the seconds queued.
    """
    listed = list(pods) if pods is not None else []
    gpus = sum(gpus_of_pod(pod) for pod in listed)
    spans: list[tuple[float, float, int]] = []
    try:
        for pod in listed:
            if (span := pod_span(pod, now=now)) is not None:
                spans.append((*span, gpus_of_pod(pod)))
    except _Unknown:
        return Usage(gpus, None, None, None)
    begun = _epoch(created)
    first_start = min((start for start, _, _ in spans), default=None)
    queued = None if begun is None or (not listed) else max(0.0, (first_start or now) - begun)
    if not listed:
        return Usage(gpus, None, None, queued)
    return Usage(
        gpus,
        round(sum((end - start) * pod_gpus for start, end, pod_gpus in spans), 1),
        round(_union_seconds([(start, end) for start, end, _ in spans]), 1),
        None if queued is None else round(queued, 1),
    )


def describe(usage: Usage) -> str:
    """One line for the task log: what the job held."""

    def said(seconds: float | None) -> str:
        return "unknown" if seconds is None else f"{seconds:g}"

    return (
        f"{usage.gpus} GPU(s), {said(usage.gpu_seconds)} GPU-seconds, running {said(usage.running_seconds)} s, "
        f"queued {said(usage.queued_seconds)} s"
    )
