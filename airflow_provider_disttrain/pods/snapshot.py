"""The last state of each pod of a job, kept while the job runs: MultiKueue deletes the worker's pods first.

When the copy of a job that Kueue's MultiKueue dispatched finishes on its worker cluster, Kueue marks the
manager's Workload finished and deletes the worker's copy at once, and the pods go with it (Kueue
v0.19 ``multikueue/workload.go``: "Delete all remote workloads when the local workload is finished").
The manager's job turns Succeeded or Failed only after that, so an ending that lists the worker's pods
then finds none: no termination message (the leader's metrics, a decorator's return value), no start
and end times (the GPU-seconds) and no container states (the failure's explanation). No Kueue setting
keeps them.

So a watch on the job's pods on the worker (``pods.pod_watch``) feeds a ``PodSnapshot`` while the job
runs. A watch sends each pod's terminal state (MODIFIED) before its DELETED event, and the DELETED event
carries the final object too. Each pod is kept TRIMMED to what the readers of a pod use (``trim``), and
at most ``MAX_PODS`` of them: a job's replicas, with room for restarts; a pod past that is not kept
(said once). Messages are cut to the kubelet's own bound for a termination message, 4096 bytes, so the
trigger's event (stored by Airflow) stays small.

Pure code over the API server's dicts; the drivers (a thread, a trigger's task) are ``pods.pod_watch``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_PODS = 256
"""Pods kept per job: the kinds' replicas are bounded far below (``MAX_REPLICAS``), with room for
pods a restart replaces."""
MAX_MESSAGE_BYTES = 4096
"""The kubelet's bound on a termination message: a longer message (a reason, a condition's) is cut there."""
_METADATA = ("name", "namespace", "labels", "creationTimestamp", "uid")
_SPEC = ("nodeName", "restartPolicy")
_CONTAINER = ("name", "resources")
_STATUS = ("phase", "reason", "message", "conditions", "startTime", "containerStatuses", "initContainerStatuses")


def _cut(value: Any) -> Any:
    """``value`` with every string longer than ``MAX_MESSAGE_BYTES`` (as UTF-8) cut there."""
    if isinstance(value, str):
        encoded = value.encode("utf-8")
        return value if len(encoded) <= MAX_MESSAGE_BYTES else encoded[:MAX_MESSAGE_BYTES].decode("utf-8", "ignore")
    if isinstance(value, Mapping):
        return {key: _cut(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut(item) for item in value]
    return value


def _pick(source: Mapping[str, Any] | None, keys: Iterable[str]) -> dict[str, Any]:
    source = source or {}
    return {key: copy.deepcopy(source[key]) for key in keys if source.get(key) is not None}


def trim(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the pod's readers use (metrics, usage, a decorator's return value, the failure explanation):
    its name, labels and creation time; its containers' names and resources, its node and restart
    policy; its phase, reason, message, conditions, start time and container states. JSON-safe when
    ``pod`` is (the API server's dict), with long strings cut (``MAX_MESSAGE_BYTES``)."""
    spec = pod.get("spec") or {}
    trimmed_spec = _pick(spec, _SPEC)
    trimmed_spec["containers"] = [_pick(container, _CONTAINER) for container in spec.get("containers") or ()]
    return _cut(
        {
            "metadata": _pick(pod.get("metadata"), _METADATA),
            "spec": trimmed_spec,
            "status": _pick(pod.get("status"), _STATUS),
        }
    )


class PodSnapshot:
    """The latest trimmed state of each pod a watch of one job's pods saw, deleted ones included."""

    def __init__(self, max_pods: int = MAX_PODS) -> None:
        self.max_pods = max_pods
        self._pods: dict[str, dict[str, Any]] = {}
        self.overflowed = False
        """Whether a pod was not kept because ``max_pods`` were already (said once by the driver)."""

    def __len__(self) -> int:
        return len(self._pods)

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Take in one watch event (ADDED, MODIFIED, DELETED: the object is the pod's latest state in each).

        A DELETED pod is kept: that is the point. A BOOKMARK or ERROR carries no pod and changes nothing.
        """
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        name = (pod.get("metadata") or {}).get("name")
        if not name:
            return
        if name not in self._pods and len(self._pods) >= self.max_pods:
            self.overflowed = True
            return
        self._pods[name] = trim(pod)

    def pods(self) -> list[dict[str, Any]]:
        """The kept pods, by name (each a copy: a reader may change it)."""
        return [copy.deepcopy(self._pods[name]) for name in sorted(self._pods)]


def with_kept(
    listed: Sequence[Mapping[str, Any]] | None, kept: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, Any]] | None:
    """The pods the ending reads: those ``listed`` now, plus the ``kept`` ones the cluster no longer has.

    A pod listed now is newer than its kept copy and wins; a kept pod whose name is not listed is gone
    (MultiKueue deleted it) and stands in for it. None when neither has any (``listed`` None: the
    LIST failed, and nothing was kept).
    """
    if not kept:
        return None if listed is None else [dict(pod) for pod in listed]
    pods = [dict(pod) for pod in listed or ()]
    names = {(pod.get("metadata") or {}).get("name") for pod in pods}
    pods.extend(dict(pod) for pod in kept if (pod.get("metadata") or {}).get("name") not in names)
    return pods


def gone(listed: Sequence[Mapping[str, Any]] | None, kept: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """The names of the ``kept`` pods not among those ``listed`` now: deleted since the watch saw them."""
    names = {(pod.get("metadata") or {}).get("name") for pod in listed or ()}
    return sorted(
        str(name) for pod in kept or () if (name := (pod.get("metadata") or {}).get("name")) and name not in names
    )
