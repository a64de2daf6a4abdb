"""What Kueue did to a job over its life: evictions (preemption above all), time queued, time running.

A job Kueue admitted can lose its admission while it runs: a higher-priority job preempts it, its pods
miss ``waitForPodsReady``'s timeout, its ClusterQueue is stopped. Kueue then evicts the Workload
(``Evicted=True``, reason ``Preempted``, ``PodsReadyTimeout``, ``ClusterQueueStopped``...), suspends the
job (its pods go), and queues it again; once re-admitted the job runs anew. That is not a failure of the
job, and the provider waits for the re-admission (see ``outcome.check_job``: a job that has run is not
bound by ``startup_timeout`` or ``queue_timeout`` again, only by ``execution_timeout``).

Everything here is read from the Workload alone (Kueue v0.17 and later): ``status.schedulingStats.evictions``
counts evictions per reason, ``status.accumulatedPastExecutionTimeSeconds`` the seconds admitted in the
earlier admit-evict cycles, and the ``Admitted``/``Finished`` conditions time the current one. Kueue's
preemption message names the preempting Workload and its job by uid
(``pkg/scheduler/preemption/preemption.go``, ``preemptionMessage``). Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.kube.conditions import condition, is_true, parse_time

# "Preempted to accommodate a workload (UID: <workload uid>, JobUID: <job uid>) due to <why>; ..."
_PREEMPTOR = re.compile(r"\(UID: (?P<workload>[^,)]+), JobUID: (?P<job>[^)]+)\)")


def _epoch(value: Any) -> float | None:
    parsed = parse_time(value)
    return parsed.timestamp() if parsed is not None else None


def evictions(workload: Mapping[str, Any]) -> dict[str, int]:
    """How many times Kueue evicted the Workload, per reason (``Preempted``, ``PodsReadyTimeout``...)."""
    stats = ((workload.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
    counts: dict[str, int] = {}
    for entry in stats:
        if isinstance(entry, Mapping) and entry.get("reason"):
            counts[str(entry["reason"])] = counts.get(str(entry["reason"]), 0) + int(entry.get("count") or 0)
    return counts


def current_eviction(workload: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(reason, message)`` while the Workload is evicted and not yet re-admitted, else None."""
    evicted = condition(workload, "Evicted")
    if evicted is None or not is_true(evicted) or is_true(condition(workload, "Admitted") or {}):
        return None
    return str(evicted.get("reason") or ""), str(evicted.get("message") or "")


def preemptor_job_uid(message: str) -> str | None:
    """The uid of the job whose Workload preempted this one, from Kueue's eviction message."""
    found = _PREEMPTOR.search(message)
    return None if found is None or found["job"] == "UNKNOWN" else found["job"]


def describe_eviction(reason: str, message: str, preemptor: str | None = None) -> str:
    """One line for the task log: why the running job lost its admission, and who took it.

    ``preemptor``: the preempting job as the caller could name it (``PyTorchJob ns/name``), when it could.
    """
    by = f" by {preemptor}" if preemptor else ""
    return (
        f"evicted by Kueue{by} ({reason}): {message}".rstrip(": ")
        + "; it is not a failure: the job waits to be admitted again, and restarts then"
    )


def running_seconds(workload: Mapping[str, Any], *, now: float) -> float | None:
    """Seconds the Workload has been admitted in total (earlier admissions and the current one)."""
    status = workload.get("status") or {}
    past = float(status.get("accumulatedPastExecutionTimeSeconds") or 0)
    admitted = condition(workload, "Admitted")
    if admitted is None or not is_true(admitted):
        return past
    since = _epoch(admitted.get("lastTransitionTime"))
    if since is None:
        return None
    finished = condition(workload, "Finished")
    until = _epoch(finished.get("lastTransitionTime")) if finished is not None and is_true(finished) else None
    return past + max(0.0, (until if until is not None else now) - since)


def kueue_record(workload: Mapping[str, Any], *, now: float) -> dict[str, Any]:
    """JSON-safe, for the task's result: the queues, evictions per reason, seconds queued and running.

    ``queued_seconds`` is the Workload's life (creation to finish, or ``now``) minus its admitted time:
    the first wait for quota plus every wait for re-admission after an eviction.
    """
    metadata = workload.get("metadata") or {}
    spec = workload.get("spec") or {}
    admission = (workload.get("status") or {}).get("admission") or {}
    by_reason = evictions(workload)
    running = running_seconds(workload, now=now)
    created = _epoch(metadata.get("creationTimestamp"))
    finished = condition(workload, "Finished")
    end = _epoch(finished.get("lastTransitionTime")) if finished is not None and is_true(finished) else None
    life = None if created is None else max(0.0, (end if end is not None else now) - created)
    return {
        "workload": metadata.get("name"),
        "local_queue": spec.get("queueName"),
        "cluster_queue": admission.get("clusterQueue"),
        "priority_class": (spec.get("priorityClassRef") or {}).get("name"),
        "priority": spec.get("priority"),
        "evictions": sum(by_reason.values()),
        "evictions_by_reason": by_reason,
        "queued_seconds": None if life is None or running is None else round(max(0.0, life - running), 1),
        "running_seconds": None if running is None else round(running, 1),
    }


def describe_record(record: Mapping[str, Any]) -> str:
    """One line for the task log at the end: how long Kueue held the job, and how often it took it away."""
    reasons = ", ".join(f"{reason} x{count}" for reason, count in sorted(record["evictions_by_reason"].items()))
    evicted = f"evicted {record['evictions']} time(s) ({reasons})" if record["evictions"] else "never evicted"
    return (
        f"Kueue: queued {record['queued_seconds']} s, admitted {record['running_seconds']} s in "
        f"ClusterQueue {record['cluster_queue']}, {evicted}"
    )
