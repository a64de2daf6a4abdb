"""Reading the leader pod's termination message (pure): where the training metrics and a decorated
task's return value arrive (``metrics``, ``decorators.base``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_disttrain.failures.diagnostics import replica_name
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.pods.logs import leader_pods


def leader_termination_message(kind: JobKind, pods: Sequence[Mapping[str, Any]]) -> tuple[str, str | None] | None:
    """``(replica, message)`` of the leader's main container as it last terminated; None without a leader pod.

    A Succeeded leader pod is preferred: an MPI launcher Job may have left failed attempts beside it.
    ``message`` is None when the container terminated without one (or has not terminated).
    """
    leaders = sorted(leader_pods(kind, pods), key=lambda pod: (pod.get("status") or {}).get("phase") != "Succeeded")
    if not leaders:
        return None
    pod = leaders[0]
    container = kind.main_container_name(pod)
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            terminated = (status.get("state") or {}).get("terminated") or {}
            return replica_name(kind, pod), terminated.get("message")
    return replica_name(kind, pod), None
