"""Training metrics handed on through XCom: the leader replica's termination message.

A container may write a short text to its termination-message file (``/dev/termination-log`` unless
the pod template sets ``terminationMessagePath``); when it exits, the kubelet copies it, at most
4096 bytes, into ``status.containerStatuses[].state.terminated.message`` of its pod. The leader
replica (the kinds table says which: PyTorch Master, else worker 0; the MPI launcher) writes its
final metrics there as one JSON object, and the operator's result carries them as ``metrics``.

``leader_metrics`` is pure: it reads the pods the operator lists at the end of the task anyway.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_disttrain.kinds import JobKind
from airflow_provider_disttrain.logs import leader_pods

TERMINATION_MESSAGE_LIMIT = 4096
"""Bytes of the termination message the kubelet keeps (``k8s.io/kubelet``'s maxTerminationMessageLength)."""


def _leader_status(kind: JobKind, pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The status of the pod's training container (the kind's container name, else its first one)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    named = [status for status in statuses if status.get("name") == kind.container_name]
    return (named or statuses or [None])[0]


def _terminated(status: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((status or {}).get("state") or {}).get("terminated") or {}


def leader_metrics(kind: JobKind, pods: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """``(metrics, "")`` from the leader's termination message, or ``(None, why there are none)``.

    An MPI launcher retried by its batch Job leaves several pods: the message of the one that exited
    0 (the run that counted) is read, the latest such when there are several.
    """
    leaders = leader_pods(kind, pods)
    if not leaders:
        return None, "the leader pod is gone (deleted, e.g. by the job's cleanPodPolicy or TTL)"
    finished = [(pod, _terminated(_leader_status(kind, pod))) for pod in leaders]
    finished.sort(key=lambda item: (item[1].get("exitCode") == 0, str(item[1].get("finishedAt") or "")))
    pod, terminated = finished[-1]
    name = (pod.get("metadata") or {}).get("name")
    message = str(terminated.get("message") or "").strip()
    if not message:
        return None, f"the leader pod {name} wrote no termination message"
    try:
        value = json.loads(message)
    except ValueError as error:
        return None, f"the termination message of the leader pod {name} is not JSON ({error}): {message[:80]!r}"
    if not isinstance(value, dict):
        return None, f"the termination message of the leader pod {name} is JSON but not an object: {message[:80]!r}"
    return value, ""
