"""Reading Kueue's hold on a training job: queued or admitted, why it waits, and since when it may run.

Kueue (kueue.x-k8s.io) admits jobs that carry the ``kueue.x-k8s.io/queue-name`` label: its webhook
creates them suspended, its job controller makes a ``Workload`` for each (owned by the job, labelled
``kueue.x-k8s.io/job-uid``; ``pkg/controller/jobframework`` in Kueue v0.17.0), and the job is
unsuspended once the Workload is admitted. While it waits, the Workload's ``QuotaReserved=False``
condition says why ("couldn't assign flavors to pod set ...: insufficient quota for nvidia.com/gpu in
flavor ..."); ``Admitted=True`` marks the admission.

Pure functions over the job and Workload objects as the API server returns them. This module imports
nothing from the rest of the provider but ``exceptions``, ``kube/`` and ``kueue/``, so ``job/`` can use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.kube.conditions import condition, parse_time
from airflow_provider_disttrain.kube.resources import ApiResource
from airflow_provider_disttrain.kube.rules import DNS1123_LABEL_MAX_LENGTH, is_dns1123_subdomain
from airflow_provider_disttrain.kueue.history import describe_eviction, preemptor_job_uid

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
"""The LocalQueue (in the job's namespace) Kueue admits the job through."""
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""Kueue's label on a Workload: the uid of the job it stands for."""


# v1beta2 is the version Kueue v0.17.0 stores (config/components/crd/bases/kueue.x-k8s.io_workloads.yaml:
# v1beta1 and v1beta2 are both served, v1beta2 is the storage version); the conditions read here are
# the same in both.
WORKLOAD = ApiResource(kind="Workload", group="kueue.x-k8s.io", version="v1beta2", plural="workloads")


def queue_name_problem(value: object) -> str | None:
    """Why Kueue would refuse ``value`` as a queue name, or None.

    Kueue's webhook checks the label as a LocalQueue name (a DNS-1123 subdomain); as a label value it is
    also at most 63 characters.
    """
    if not isinstance(value, str) or not value:
        return f"expected a non-empty LocalQueue name, got {value!r}"
    if len(value) > DNS1123_LABEL_MAX_LENGTH or not is_dns1123_subdomain(value):
        return (
            f"{value!r} is not a valid LocalQueue name (at most {DNS1123_LABEL_MAX_LENGTH} lower-case letters, "
            "digits, '-' and '.', starting and ending with a letter or digit)"
        )
    return None


def validate_queue_name(value: object, field: str) -> None:
    if problem := queue_name_problem(value):
        raise InvalidJobSpecError(field, problem)


def queue_name(obj: Mapping[str, Any]) -> str | None:
    """The Kueue queue a job was submitted to (its label), or None for a job Kueue does not manage."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL)


def _is(condition: Mapping[str, Any] | None, status: str) -> bool:
    return condition is not None and str(condition.get("status", "")).lower() == status


def _epoch(value: Any) -> float | None:
    parsed = parse_time(value)
    return parsed.timestamp() if parsed is not None else None


def held_by_kueue(job: Mapping[str, Any]) -> bool:
    """Whether the job waits in a Kueue queue now: it carries the queue label and is suspended.

    Read from the job's own ``Suspended`` condition (every kind has one: the training-operator,
    mpi-operator and Trainer set it while ``suspend`` is true), so the sync wait, the sensor and the
    trigger can tell from the job alone. A labelled job on a cluster without Kueue is never suspended,
    so it is never "held".
    """
    return queue_name(job) is not None and _is(condition(job, "Suspended"), "true")


def released_by_kueue(job: Mapping[str, Any] | None, suspend_path: Sequence[str]) -> bool:
    """Whether Kueue has let a job of its queue go: it carries the queue label and its ``suspend`` field
    (at ``suspend_path``, the kind's) is no longer true.

    Read from the spec, not the conditions: on a MultiKueue manager no controller writes the job's
    conditions (its ``managedBy`` names MultiKueue), so they say nothing until the worker's status is
    mirrored. Kueue unsuspends the manager's job once its Workload is admitted, which MultiKueue does only
    after a worker reserved quota for it (``status.clusterName`` is set by then): the worker's pods may
    already run, and a short job's are deleted with the worker's copy about a second after they end,
    often before the manager's job shows ``Running`` (seen on the local two-cluster environment).
    """
    if job is None or queue_name(job) is None:
        return False
    value: Any = job
    for key in suspend_path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value is not True


def admitted_at(job: Mapping[str, Any]) -> float | None:
    """When a queued job was last released by Kueue (epoch seconds), or None if it never was.

    The job's ``Suspended=False`` transition (reason ``...Resumed``), which its operator writes when
    Kueue unsuspends it after admission. Chosen over the Workload's ``Admitted`` time because it is on
    the job (no extra read, no Workload permission needed) and it is when pods can start at all.
    """
    if queue_name(job) is None:
        return None
    suspended = condition(job, "Suspended")
    return _epoch(suspended.get("lastTransitionTime")) if _is(suspended, "false") and suspended else None


def startup_clock_shift(job: Mapping[str, Any]) -> float | None:
    """Seconds a deadline counted from the job's creation moves by the time it waited for Kueue.

    0 for a job Kueue never held; None while Kueue holds it (the startup clock has not started).
    """
    if held_by_kueue(job):
        return None
    released = admitted_at(job)
    created = _epoch((job.get("metadata") or {}).get("creationTimestamp"))
    if released is None or created is None:
        return 0.0
    return max(0.0, released - created)


def describe_hold(job: Mapping[str, Any]) -> str:
    return f"queued by Kueue in LocalQueue {queue_name(job)!r}"


# -- Workloads ------------------------------------------------------------------------------------------


def standing_workload(workloads: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Of one job's Workloads, the one that stands for it: the newest not being deleted (Kueue replaces a
    job's Workload with a new one, of a new name and uid, and deletes the old one before or after)."""
    standing = [workload for workload in workloads if not (workload.get("metadata") or {}).get("deletionTimestamp")]
    standing.sort(key=lambda workload: str((workload.get("metadata") or {}).get("creationTimestamp") or ""))
    return standing[-1] if standing else None


def workload_of(workloads: Iterable[Mapping[str, Any]], job_uid: str) -> Mapping[str, Any] | None:
    """The Workload standing for the job of ``job_uid`` (``standing_workload`` of those of its label)."""
    return standing_workload(
        workload
        for workload in workloads
        if ((workload.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL) == job_uid
    )


def is_admitted(workload: Mapping[str, Any]) -> bool:
    return _is(condition(workload, "Admitted"), "true")


def waiting_message(workload: Mapping[str, Any] | None) -> str | None:
    """Why Kueue has not admitted the job, in Kueue's words; None once it is admitted.

    ``QuotaReserved=False``: the scheduler's reason (insufficient quota, LocalQueue missing or
    inactive...). Quota reserved but not ``Admitted``: the admission checks still run. ``Evicted=True``
    (preempted, PodsReady timeout) explains a job that is waiting again.
    """
    if workload is None:
        return "waiting for Kueue to create the job's Workload"
    if is_admitted(workload):
        return None
    name = (workload.get("metadata") or {}).get("name")
    evicted = condition(workload, "Evicted")
    quota = condition(workload, "QuotaReserved")
    if _is(evicted, "true") and evicted:
        reason, message = str(evicted.get("reason") or ""), str(evicted.get("message") or "")
        preemptor = preemptor_job_uid(message)
        return f"Workload {name} " + describe_eviction(reason, message, preemptor and f"the job of uid {preemptor}")
    if _is(quota, "true"):
        cluster_queue = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
        admitted = condition(workload, "Admitted")
        detail = (admitted or {}).get("message") or "waiting for its admission checks"
        return f"quota reserved in ClusterQueue {cluster_queue}; {detail}"
    if quota is not None and quota.get("message"):
        return str(quota["message"])
    return f"Workload {name} is pending in Kueue (not yet considered by its scheduler)"
