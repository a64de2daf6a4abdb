"""Can Kueue ever admit the job? One table of Kueue's reasons, and the check of a LocalQueue before submitting.

A job Kueue holds waits for its Workload to be admitted, and the Workload's ``QuotaReserved=False``
condition says why it is not. Most reasons are worth waiting out: quota frees as other jobs finish.
Some say that Kueue never will as its queues stand: the job asks for more than its ClusterQueue can
ever hold, no flavor fits it, its LocalQueue or ClusterQueue is missing, stopped or inactive. Waiting
for those would only end at ``queue_timeout``, so the wait ends at once (``outcome.check_job``: outcome
``inadmissible``, the job deleted). Which reason is which is the table ``NEVER_ADMITTED`` below, read
from Kueue v0.19.2's source, where each reason is set:

- ``ExceedsMaxQuota``, ``NoMatchingFlavor``, ``WaitingForQuota``, ``TopologyPlacementFailed``:
  ``pkg/scheduler/flavorassigner`` (``fitsResourceQuota``, ``resolveNoFitReason``: per resource group the
  least severe reason over the flavors tried, over the groups the most severe, so ``ExceedsMaxQuota``
  means that no flavor could ever hold it, even with every other Workload gone);
- ``WaitingForPodsReady``: ``pkg/scheduler/scheduler.go`` (``waitForPodsReadyIfNeeded``, only with
  ``waitForPodsReady.blockAdmission``);
- ``Misconfigured``, ``Suspended``: ``pkg/controller/core/workload_controller.go``
  (``reconcileOn{Local,Cluster}QueueActiveState``, ``getQueueBlocker``).

These granular reasons are written only with Kueue's ``UnadmittedWorkloadsObservability`` feature
gate (v0.19, beta, off by default; ``pkg/workload.UnadmittedWorkloadReasonWithFallback``). Without it,
and on Kueue v0.17, a Workload says ``Pending`` whatever the quota problem (its message still says
``> maximum capacity``; the provider does not read meaning into messages, so such a job waits for
``queue_timeout``), and ``Inadmissible`` for every queue problem, which is final here too.

Before a job is submitted, ``queue_problem`` judges its LocalQueue (and the LocalQueue's ClusterQueue,
when the connection may read it), so a job for a queue that cannot admit anything is never created.

Pure functions over the objects as the API server returns them (``kueue.x-k8s.io/v1beta2``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_disttrain.kube.conditions import condition, is_true
from airflow_provider_disttrain.kube.resources import ApiResource

LOCAL_QUEUE = ApiResource(kind="LocalQueue", group="kueue.x-k8s.io", version="v1beta2", plural="localqueues")
CLUSTER_QUEUE = ApiResource(
    kind="ClusterQueue", group="kueue.x-k8s.io", version="v1beta2", plural="clusterqueues", namespaced=False
)

# Kueue's QuotaReserved=False reasons after which it can never admit the Workload as its queues stand,
# and what each means. Every other reason (below) is waited out, bounded by queue_timeout.
NEVER_ADMITTED: dict[str, str] = {
    # Kueue v0.19+ with UnadmittedWorkloadsObservability.
    "ExceedsMaxQuota": (
        "the job asks for more than its ClusterQueue can ever hold (nominal quota, plus what its cohort may lend)"
    ),
    "NoMatchingFlavor": (
        "no ResourceFlavor of its ClusterQueue matches the job's node selector, affinity or tolerations"
    ),
    "Misconfigured": "its LocalQueue or ClusterQueue does not exist",
    "Suspended": "its LocalQueue or ClusterQueue is stopped or inactive",
    # Kueue v0.17, and v0.19 without the gate: every queue problem (missing, stopped, inactive) says this.
    "Inadmissible": "its LocalQueue or ClusterQueue does not exist, is stopped or is inactive",
}

# The reasons worth waiting for (for the log and the docs; an unknown reason is waited for too).
WAITING: dict[str, str] = {
    "WaitingForQuota": "waiting for other jobs to free quota in its ClusterQueue or cohort",
    "TopologyPlacementFailed": "its topology request does not fit the nodes' current usage",
    "WaitingForPodsReady": "waiting for the jobs admitted before it to have their pods ready (waitForPodsReady)",
    "WaitingForPreemptedWorkloads": "waiting for the jobs preempted for it to give their quota back",
    "PendingEvaluation": "waiting for Kueue's scheduler to consider it",
    "Pending": "waiting for quota (Kueue v0.17, or without UnadmittedWorkloadsObservability)",
    "AdmissionGated": "held by an admission gate",
}


@dataclass(frozen=True)
class NeverAdmitted:
    """Kueue's word that it can never admit the job: its reason, its message, and what the reason means."""

    reason: str
    message: str
    meaning: str

    def describe(self) -> str:
        return f"Kueue can never admit it ({self.reason}: {self.meaning}): {self.message}"


def never_admitted(workload: Mapping[str, Any] | None) -> NeverAdmitted | None:
    """Kueue's final word on a Workload it has not admitted (``NEVER_ADMITTED``), or None: wait on."""
    if workload is None or is_true(condition(workload, "Admitted") or {}):
        return None
    quota = condition(workload, "QuotaReserved")
    if quota is None or str(quota.get("status", "")).lower() != "false":
        return None
    reason = str(quota.get("reason") or "")
    if reason not in NEVER_ADMITTED:
        return None
    return NeverAdmitted(reason, str(quota.get("message") or "").strip(), NEVER_ADMITTED[reason])


# -- the LocalQueue, before submitting --------------------------------------------------------------------


UNREADABLE: Mapping[str, Any] = {}
"""Stands for a queue the connection may not read (403): nothing is judged from it."""


def _stop_policy(obj: Mapping[str, Any]) -> str | None:
    policy = (obj.get("spec") or {}).get("stopPolicy")
    return str(policy) if policy and policy != "None" else None


def _inactive(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(reason, message)`` of an ``Active=False`` condition; None when active or not judged yet."""
    active = condition(obj, "Active")
    if active is None or str(active.get("status", "")).lower() != "false":
        return None
    return str(active.get("reason") or ""), str(active.get("message") or "")


def cluster_queue_problem(name: str, cluster_queue: Mapping[str, Any] | None) -> str | None:
    """Why the ClusterQueue ``name`` admits nothing (None: it may, or it could not be read)."""
    if cluster_queue is UNREADABLE:
        return None
    if cluster_queue is None:
        return f"ClusterQueue {name} doesn't exist"
    if policy := _stop_policy(cluster_queue):
        return f"ClusterQueue {name} is stopped (spec.stopPolicy {policy})"
    if inactive := _inactive(cluster_queue):
        reason, message = inactive
        return f"ClusterQueue {name} is inactive ({reason}): {message}".rstrip(": ")
    return None


def queue_problem(
    namespace: str,
    name: str,
    local_queue: Mapping[str, Any] | None,
    cluster_queue: Mapping[str, Any] | None = UNREADABLE,
) -> str | None:
    """Why a job submitted to LocalQueue ``namespace/name`` could never be admitted, in Kueue's words, or None.

    ``local_queue``: the LocalQueue (None: it does not exist; ``UNREADABLE``: not judged); ``cluster_queue``:
    the ClusterQueue it points to (None: it does not exist; ``UNREADABLE``: the connection may not read
    ClusterQueues). The ClusterQueue, when read, is judged rather than the LocalQueue's word about it,
    which Kueue updates later (a LocalQueue made with its ClusterQueue says ``ClusterQueueIsInactive``
    until that ClusterQueue becomes active). A queue Kueue has not judged yet (no ``Active`` condition)
    is taken as usable: the Workload will say otherwise (``never_admitted``).
    """
    if local_queue is UNREADABLE:
        return None
    if local_queue is None:
        return f"LocalQueue {name} doesn't exist in namespace {namespace}"
    if policy := _stop_policy(local_queue):
        return f"LocalQueue {name} is stopped (spec.stopPolicy {policy})"
    cq_name = str((local_queue.get("spec") or {}).get("clusterQueue") or "")
    if cluster_queue is not UNREADABLE:
        if problem := cluster_queue_problem(cq_name, cluster_queue):
            return f"LocalQueue {name} points to {problem}"
        return None
    if inactive := _inactive(local_queue):
        reason, message = inactive
        return f"LocalQueue {name} is inactive ({reason}): {message} (ClusterQueue {cq_name})"
    return None
