"""Copying the training pods' logs into the Airflow task log.

``log_targets`` (pure) chooses which pods to follow: the leader by default (PyTorch Master, or
worker 0 when there is none; the MPI launcher), all replicas, or named ones. ``LogForwarder`` reads
them through the sync hook and emits only lines it has not emitted yet, so the sync wait can call it
on every poll (live logs) and the deferrable path once at the end.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_disttrain.diagnostics import replica_name
from airflow_provider_disttrain.kinds import REPLICA_INDEX_LABEL, JobKind

LEADER = "leader"
ALL = "all"
NONE = "none"


def _is_leader(kind: JobKind, pod: Mapping[str, Any], leader: str) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(kind.replica_type_label) != kind.replica_label_value(leader):
        return False
    return labels.get(REPLICA_INDEX_LABEL) in (None, "0")


def leader_pods(kind: JobKind, pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pod that speaks for the job; an MPI launcher Job may have made several (retries), all kept."""
    for leader in (kind.leader_replica, kind.worker_replica):
        if leader and (found := [pod for pod in pods if _is_leader(kind, pod, leader)]):
            return found
    return []


def _container(kind: JobKind, pod: Mapping[str, Any]) -> str | None:
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    if kind.container_name in names:
        return kind.container_name
    return names[0] if names else None


def log_targets(
    kind: JobKind, pods: Sequence[Mapping[str, Any]], log_replicas: str | Sequence[str]
) -> list[tuple[str, str | None]]:
    """``(pod name, container)`` pairs to copy logs from, in a stable order."""
    if log_replicas == NONE:
        chosen: list[Mapping[str, Any]] = []
    elif log_replicas == LEADER:
        chosen = leader_pods(kind, pods)
    elif log_replicas == ALL:
        chosen = list(pods)
    else:
        wanted = {str(name).lower() for name in log_replicas}
        chosen = [
            pod
            for pod in pods
            if replica_name(kind, pod).lower() in wanted
            or str(((pod.get("metadata") or {}).get("labels") or {}).get(kind.replica_type_label)) in wanted
        ]
    return sorted(((pod["metadata"]["name"], _container(kind, pod)) for pod in chosen), key=lambda target: target[0])


def validate_log_replicas(value: object) -> None:
    if isinstance(value, str):
        if value not in (LEADER, ALL, NONE):
            raise ValueError(
                f"log_replicas: {value!r} is not 'leader', 'all', 'none' or a list of replicas like ['worker-1']"
            )
    elif not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"log_replicas: expected 'leader', 'all', 'none' or a list of strings, got {value!r}")


LOG_WINDOW_LINES = 2000
_OVERLAP_LINES = 3


def new_lines_start(previous_tail: Sequence[str], lines: Sequence[str]) -> int:
    """Where the lines not emitted yet begin in ``lines``, the log's latest window.

    The window is found again by the last few lines emitted before; when they are no longer in it
    (more than a window was written since, or the container restarted and its log began anew),
    the whole window is new.
    """
    overlap = list(previous_tail[-_OVERLAP_LINES:])
    if not overlap:
        return 0
    for end in range(len(lines), len(overlap) - 1, -1):
        if list(lines[end - len(overlap) : end]) == overlap:
            return end
    return 0


class LogForwarder:
    """Emits each selected pod's new log lines to ``logger``, remembering what it already emitted.

    Each read asks for the log's last ``LOG_WINDOW_LINES`` lines only, so a long training log costs
    the same on every poll and never stops being followed.
    """

    def __init__(
        self,
        hook: Any,
        kind: JobKind,
        job_name: str,
        namespace: str,
        log_replicas: str | Sequence[str],
        logger: logging.Logger | Any,
    ) -> None:
        self.hook = hook
        self.kind = kind
        self.job_name = job_name
        self.namespace = namespace
        self.log_replicas = log_replicas
        self.logger = logger
        self._emitted_tail: dict[str, list[str]] = {}

    def forward(self, pods: Sequence[Mapping[str, Any]] | None = None) -> int:
        """Emit lines not emitted before; returns how many. Never raises: logs are a courtesy."""
        if self.log_replicas == NONE:
            return 0
        emitted = 0
        try:
            if pods is None:
                pods = self.hook.list_job_pods(self.job_name, self.namespace)
            for pod_name, container in log_targets(self.kind, pods, self.log_replicas):
                text = self.hook.read_pod_log(pod_name, self.namespace, container, tail_lines=LOG_WINDOW_LINES)
                lines = text.splitlines()
                new = lines[new_lines_start(self._emitted_tail.get(pod_name, []), lines) :]
                for line in new:
                    self.logger.info("[%s] %s", pod_name, line)
                emitted += len(new)
                if new:
                    self._emitted_tail[pod_name] = new[-_OVERLAP_LINES:]
        except Exception as error:
            self.logger.warning("Could not read the logs of %s %s: %r", self.kind.kind, self.job_name, error)
        return emitted
