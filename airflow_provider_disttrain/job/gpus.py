"""GPUs of a job: what each replica type asks for (from the spec) and what the job holds now (from its status).

Pure, shared by the UI (a job read whole) and the trigger's telemetry (a trimmed view without the spec: the
operator hands the trigger ``gpus_per_replica`` once, when it defers). Every vendor's extended resource
counts (``nvidia.com/gpu``, ``amd.com/gpu``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.job.kinds import kind_of
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.job.view import JobView

GPU_SUFFIX = "/gpu"


def gpu_count(value: Any) -> int:
    """A GPU limit as Kubernetes reads the quantity (``2``, ``"2"``, ``"2E0"``, ``"1000m"``); a fraction
    (which the API server refuses for an extended resource) counts whole, and what is no quantity as 0:
    one odd job must not break what is shown or counted for all the others."""
    # Imported here: ``kubernetes.utils`` imports the whole client, which importing the operators must not.
    from kubernetes.utils.quantity import parse_quantity

    try:
        quantity = parse_quantity(value)
    except (ValueError, TypeError):
        return 0
    return max(math.ceil(quantity), 0) if quantity.is_finite() else 0


def _gpus_of_limits(limits: Mapping[str, Any]) -> int:
    return sum(gpu_count(value) for name, value in limits.items() if str(name).endswith(GPU_SUFFIX))


def gpus_of_pod(pod: Mapping[str, Any]) -> int:
    """GPUs one pod (or a pod template: the same ``spec.containers``) asks for: its containers' GPU limits."""
    containers = ((pod.get("spec") or {}).get("containers")) or []
    return sum(_gpus_of_limits(((container.get("resources") or {}).get("limits")) or {}) for container in containers)


def replica_specs(job: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Per replica type: ``desired`` replicas and ``gpus`` per replica, from the job's spec.

    A TrainJob has no replica specs: its ``node`` replicated job has ``numNodes`` pods, each with the
    trainer's ``resourcesPerNode``.
    """
    # Its own lookup: the spec is read where no look at the job's status is taken (the manifest or the
    # job just created, before a deferral: ``gpus_per_replica``).
    kind = kind_of(job)
    spec = job.get("spec") or {}
    if kind.node_count_path is not None:
        # Pods from a runtime (TrainJob): the node count's section holds the per-node resources beside it.
        section: Mapping[str, Any] = job
        for key in kind.node_count_path[:-1]:
            section = section.get(key) or {}
        gpus = _gpus_of_limits(((section.get("resourcesPerNode") or {}).get("limits")) or {})
        return {kind.worker_replica: {"desired": int(section.get(kind.node_count_path[-1]) or 1), "gpus": gpus}}
    specs = spec.get(kind.replica_specs_key or "") or {}
    return {
        str(replica): {
            "desired": int(replica_spec.get("replicas") or 1),
            "gpus": gpus_of_pod(replica_spec.get("template") or {}),
        }
        for replica, replica_spec in specs.items()
        if isinstance(replica_spec, Mapping)
    }


def gpus_per_replica(job: Mapping[str, Any]) -> dict[str, int]:
    """GPUs one pod of each replica type asks for (replica types that ask for none left out)."""
    return {replica: spec["gpus"] for replica, spec in replica_specs(job).items() if spec["gpus"]}


def gpus_held(view: JobView, per_replica: Mapping[str, int] | None = None) -> int:
    """GPUs the job's pods hold now: its active replicas times their GPUs; none while suspended or done.

    ``per_replica`` (``gpus_per_replica`` of the manifest) for a view without the spec; else read from it.
    """
    if view.job is None or view.state in (JobState.SUSPENDED, JobState.SUCCEEDED, JobState.FAILED):
        return 0
    per_replica = gpus_per_replica(view.job) if per_replica is None else per_replica
    return sum(counts.get("active", 0) * per_replica.get(replica, 0) for replica, counts in view.replicas.items())
