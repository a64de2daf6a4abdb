"""The wait estimate of the jobs Kueue holds, for the tab and the jobs page (issue 29: each row's ``wait``).

Pure: the callers hand in how to read a namespace's Workloads and a LocalQueue's pending Workloads (the
app reads them through its short-lived caches: one LIST of Workloads per namespace and one visibility
GET per LocalQueue per ``ui_cache_seconds``, for every viewer), and ``now``. Only namespaces and
LocalQueues with a held job are read at all. The estimate itself is ``kueue.estimate``'s, the one the
task's progress line says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from airflow_provider_disttrain.kube.conditions import conditions
from airflow_provider_disttrain.kueue.estimate import AdmissionLog
from airflow_provider_disttrain.kueue.hold import held_by_kueue, queue_name, workload_of
from airflow_provider_disttrain.kueue.position import MalformedAnswer, positions

WorkloadsOf = Callable[[str], list[dict[str, Any]]]
"""``workloads_of(namespace)``: the namespace's Workloads as ``workload_read`` keeps them."""
PendingOf = Callable[[str, str], list[dict[str, Any]]]
"""``pending_of(namespace, local_queue)``: the LocalQueue's pending Workloads as ``pending_read`` keeps them."""

_CONDITION_KEYS = ("type", "status", "reason", "lastTransitionTime")


def workload_read(workload: Mapping[str, Any]) -> dict[str, Any]:
    """What the estimate reads of a Workload (what the UI's cache keeps): identity, its job's uid label, its
    LocalQueue, its ClusterQueue once admitted and its conditions without their messages."""
    metadata = workload.get("metadata") or {}
    status = workload.get("status") or {}
    cluster_queue = (status.get("admission") or {}).get("clusterQueue")
    return {
        "metadata": {key: metadata[key] for key in ("name", "uid", "labels", "creationTimestamp") if key in metadata},
        "spec": {"queueName": (workload.get("spec") or {}).get("queueName")},
        "status": {
            "conditions": [{k: c[k] for k in _CONDITION_KEYS if k in c} for c in conditions(workload)],
            **({"admission": {"clusterQueue": cluster_queue}} if cluster_queue else {}),
        },
    }


def pending_read(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The items of a ``PendingWorkloadsSummary`` as the UI's cache keeps them: a name and two positions."""
    return [
        {
            "metadata": {"name": (item.get("metadata") or {}).get("name")},
            **{key: item[key] for key in ("positionInLocalQueue", "positionInClusterQueue") if key in item},
        }
        for item in summary.get("items") or []
        if isinstance(item, Mapping)
    ]


def key_of(job: Mapping[str, Any]) -> tuple[str, str]:
    """What ``job_waits`` keys a job's wait by: its namespace and name."""
    metadata = job.get("metadata") or {}
    return str(metadata.get("namespace")), str(metadata.get("name"))


def job_waits(
    jobs: Iterable[Mapping[str, Any]], workloads_of: WorkloadsOf, pending_of: PendingOf, now: float
) -> dict[tuple[str, str], dict[str, Any]]:
    """The ``wait`` of each job Kueue holds, by (namespace, name); jobs not held have none."""
    held = [job for job in jobs if held_by_kueue(job)]
    logs: dict[str, tuple[AdmissionLog, list[dict[str, Any]]]] = {}
    places: dict[tuple[str, str], dict[str, Any]] = {}
    waits: dict[tuple[str, str], dict[str, Any]] = {}
    for job in held:
        metadata = job.get("metadata") or {}
        namespace, local_queue = str(metadata.get("namespace")), str(queue_name(job))
        if namespace not in logs:
            workloads = workloads_of(namespace)
            log = AdmissionLog()
            log.see_all(workloads)
            logs[namespace] = (log, workloads)
        log, workloads = logs[namespace]
        if (namespace, local_queue) not in places:
            try:
                places[(namespace, local_queue)] = positions(local_queue, {"items": pending_of(namespace, local_queue)})
            except MalformedAnswer:
                places[(namespace, local_queue)] = {}
        workload = workload_of(workloads, str(metadata.get("uid")))
        name = (workload.get("metadata") or {}).get("name") if workload is not None else None
        position = places[(namespace, local_queue)].get(str(name)) if name else None
        waits[key_of(job)] = log.estimate(local_queue, position, now).as_json()
    return waits
