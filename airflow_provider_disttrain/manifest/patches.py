"""Merge patches for changing a running job: scaling workers, suspending, resuming. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.kinds import JobKind


def current_workers(kind: JobKind, job: Mapping[str, Any]) -> int | None:
    value: Any = job
    for part in kind.worker_replicas_path():
        value = value.get(part) if isinstance(value, Mapping) else None
    return value if isinstance(value, int) else None


def scale_patch(kind: JobKind, job: Mapping[str, Any], replicas: int) -> dict[str, Any]:
    """Patch setting the Worker replicas; an elastic job must stay within [minReplicas, maxReplicas]."""
    field = ".".join(kind.worker_replicas_path())
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidJobSpecError(field, f"replicas must be an integer >= 1, got {replicas!r}")
    if current_workers(kind, job) is None:
        raise InvalidJobSpecError(field, f"the job has no {kind.worker_replica} replicas to scale")
    elastic = (job.get("spec") or {}).get("elasticPolicy") if kind.supports_elastic else None
    if elastic:
        low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if (low is not None and replicas < low) or (high is not None and replicas > high):
            raise InvalidJobSpecError(field, f"{replicas} is outside the job's elasticPolicy range [{low}, {high}]")
    return {"spec": {kind.replica_specs_key: {kind.worker_replica: {"replicas": replicas}}}}


def suspend_patch(suspend: bool) -> dict[str, Any]:
    return {"spec": {"runPolicy": {"suspend": suspend}}}
