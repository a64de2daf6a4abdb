"""Explaining why a job failed or never started, from its pods and events.

Pure functions over the dicts the API server returns. The goal is the message an on-call engineer
needs in the task log: which replica, what Kubernetes said (OOMKilled, exit code 1,
ImagePullBackOff, Unschedulable and the scheduler's reason), the failing container's last lines and
the recent Warning events, instead of a bare "Failed".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.job.status import failure_condition

MAX_EVENTS = 10
MAX_EVENT_PODS = 10
"""Pods whose Warning events are read (one request each): the troubled ones, and those not running yet."""
MAX_LOGGED_PODS = 3
"""Failing pods whose container's last lines are read."""


@dataclass(frozen=True)
class Evidence:
    """What the cluster showed about a job that did not succeed, as the hook read it (``log_tails``: pod
    name to its failing container's last lines). Empty when it could not be read: the headline stands."""

    pods: tuple[Mapping[str, Any], ...] = ()
    events: tuple[Mapping[str, Any], ...] = ()
    log_tails: Mapping[str, str] = field(default_factory=dict)


def replica_name(kind: JobKind, pod: Mapping[str, Any]) -> str:
    """``worker-1``, ``master-0``, ``launcher``, a TrainJob's ``node-1``: the replica a pod plays, from the
    operator's labels (the kinds table names them)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    replica = labels.get(kind.pod_labels.replica_type)
    index = labels.get(kind.pod_labels.replica_index)
    if replica:
        return f"{replica}-{index}" if index is not None else str(replica)
    return str((pod.get("metadata") or {}).get("name"))


def _container_problem(status: Mapping[str, Any]) -> str | None:
    state = status.get("state") or {}
    last = status.get("lastState") or {}
    waiting = state.get("waiting")
    terminated = state.get("terminated") or last.get("terminated")
    parts = []
    if terminated and (terminated.get("exitCode") not in (0, None) or terminated.get("reason") == "OOMKilled"):
        reason = terminated.get("reason") or "Error"
        parts.append(f"{reason}, exit code {terminated.get('exitCode')}")
        if terminated.get("message"):
            parts.append(str(terminated["message"]).strip())
    if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
        parts.insert(0, f"{waiting.get('reason')}" + (f": {waiting['message']}" if waiting.get("message") else ""))
    if not parts:
        return None
    restarts = status.get("restartCount") or 0
    suffix = f" (restarted {restarts}x)" if restarts else ""
    return f"container {status.get('name')}: {'; '.join(parts)}{suffix}"


def pod_problems(pod: Mapping[str, Any]) -> list[str]:
    """What is wrong with one pod, most telling first; empty for a healthy pod."""
    status = pod.get("status") or {}
    problems = []
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and str(condition.get("status")).lower() == "false":
            problems.append(f"{condition.get('reason') or 'Unschedulable'}: {condition.get('message') or ''}".strip())
    for container_status in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        if problem := _container_problem(container_status):
            problems.append(problem)
    if status.get("reason"):
        problems.append(f"pod {status.get('reason')}: {status.get('message') or ''}".strip())
    return problems


def _failed(terminated: Mapping[str, Any] | None) -> bool:
    return terminated is not None and terminated.get("exitCode") not in (0, None)


def failing_container(pod: Mapping[str, Any]) -> tuple[str, bool] | None:
    """``(container, previous)`` whose log explains the pod's failure, if a container ended badly.

    ``previous`` is True when the failure is only in ``lastState.terminated``: the kubelet restarted
    the container (restartPolicy OnFailure, the PyTorchJob default, or a crash loop), so its current
    log is the new run's and the failed run's log is the previous one.
    """
    for container_status in (pod.get("status") or {}).get("containerStatuses") or []:
        name = str(container_status.get("name"))
        if _failed((container_status.get("state") or {}).get("terminated")):
            return name, False
        if _failed((container_status.get("lastState") or {}).get("terminated")):
            return name, True
    return None


def pods_with_problems(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [pod for pod in pods if pod_problems(pod)]


def pods_not_running(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods still Pending (or Unknown): a FailedMount or FailedScheduling event may say why."""
    return [pod for pod in pods if (pod.get("status") or {}).get("phase") not in ("Running", "Succeeded", "Failed")]


def event_objects(kind: JobKind, name: str, pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The objects whose Warning events explain the job ``name``: the job, the objects its controller
    makes for it (``kind.event_object_suffixes``) and at most ``MAX_EVENT_PODS`` troubled or waiting pods."""
    pods = list(pods)
    troubled = [pod["metadata"]["name"] for pod in pods_with_problems(pods) + pods_not_running(pods)]
    return {
        name,
        *(name + suffix for suffix in kind.event_object_suffixes),
        *list(dict.fromkeys(troubled))[:MAX_EVENT_PODS],
    }


def logs_to_read(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, bool]]:
    """``(pod, container, previous)`` of the failing containers whose last lines explain the failure
    (``previous``: the container restarted since, so its failed run's log is the previous one)."""
    wanted = []
    for pod in pods_with_problems(pods)[:MAX_LOGGED_PODS]:
        if failing := failing_container(pod):
            container, previous = failing
            wanted.append((str(pod["metadata"]["name"]), container, previous))
    return wanted


def explain(
    kind: JobKind,
    title: str,
    headline: str,
    job: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    log_tails: Mapping[str, str] | None = None,
) -> str:
    """A multi-line explanation: headline, Failed condition, each replica's phase and state, logs, events."""
    lines = [headline]
    if job and (failure := failure_condition(job)):
        reason, message = failure
        lines.append(f"Failed condition: {reason}: {message}".rstrip(": "))
    pods = list(pods)
    if pods:
        lines.append(f"Replicas of {title}:")
    for pod in sorted(pods, key=lambda p: replica_name(kind, p)):
        phase = (pod.get("status") or {}).get("phase") or "Unknown"
        problems = pod_problems(pod)
        detail = f" - {'; '.join(problems)}" if problems else ""
        lines.append(f"  {replica_name(kind, pod)} ({pod['metadata']['name']}): {phase}{detail}")
    for pod_name, tail in (log_tails or {}).items():
        if tail.strip():
            lines.append(f"Last log lines of {pod_name}:")
            lines.extend(f"  | {line}" for line in tail.rstrip().splitlines())
    events = list(events)[-MAX_EVENTS:]
    if events:
        lines.append("Recent Warning events:")
    for event in events:
        involved = (event.get("involvedObject") or {}).get("name")
        lines.append(f"  {involved}: {event.get('reason')}: {str(event.get('message') or '').strip()}")
    return "\n".join(lines)
