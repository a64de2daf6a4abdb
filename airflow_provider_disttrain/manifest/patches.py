"""Merge patches for changing a running job: scaling workers, suspending, resuming. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.manifest.pod_validation import MAX_REPLICAS


def _worker_key(kind: JobKind, job: Mapping[str, Any]) -> str:
    """The Worker spec's key as stored: the training-operator also reads ``worker`` and renames it."""
    specs = (job.get("spec") or {}).get(kind.replica_specs_key) if isinstance(job.get("spec"), Mapping) else None
    if isinstance(specs, Mapping) and kind.worker_replica not in specs:
        for key in specs:
            if kind.canonical_replica_type(key) == kind.worker_replica:
                return key
    return kind.worker_replica


def _worker_count_path(kind: JobKind, job: Mapping[str, Any]) -> tuple[str, ...]:
    if not kind.has_replica_specs:
        return kind.worker_replicas_path()
    return ("spec", str(kind.replica_specs_key), _worker_key(kind, job), "replicas")


def current_workers(kind: JobKind, job: Mapping[str, Any]) -> int | None:
    value = _get_path(job, _worker_count_path(kind, job))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _without_elastic_policy(kind: JobKind) -> str:
    if not kind.supports_elastic:
        return (
            f"{kind.kind} has no elastic training: its running pods keep the cluster they started with "
            "(WORLD_SIZE, TF_CONFIG, ...), so added workers would never join and removed ones would stall the rest"
        )
    return (
        f"the {kind.kind} has no elasticPolicy: its running pods keep the WORLD_SIZE they started with, so "
        "added workers would never join and removed ones would stall the rest; give the job an elasticPolicy"
    )


def scale_patch(kind: JobKind, job: Mapping[str, Any], replicas: int) -> dict[str, Any]:
    """Patch setting the Worker replicas.

    An elastic job must stay within [minReplicas, maxReplicas]. A job without an elastic policy is
    scaled only while suspended (resuming recreates every pod at the new size), unless its pods follow
    the worker count by themselves (``JobKind.follows_worker_count``).
    """
    path = _worker_count_path(kind, job)
    field = ".".join(path)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise InvalidJobSpecError(field, f"replicas must be an integer >= 1, got {replicas!r}")
    if replicas > MAX_REPLICAS:
        raise InvalidJobSpecError(field, f"replicas must be at most {MAX_REPLICAS}, got {replicas}")
    if not kind.scalable_while_suspended:
        # Trainer v2.3's CRD: spec.trainer carries XValidation "self == oldSelf" (immutable), and v2.2
        # removed the elastic policy; the API server would refuse the patch.
        raise InvalidJobSpecError(
            field,
            f"a {kind.kind}'s node count cannot change once it is created (the field is immutable and "
            f"{kind.kind} has no elastic training); submit a new {kind.kind} with the node count you want",
        )
    if current_workers(kind, job) is None:
        raise InvalidJobSpecError(field, f"the job has no {kind.worker_replica} replicas to scale")
    spec = job.get("spec") or {}
    elastic = spec.get("elasticPolicy") if kind.supports_elastic else None
    suspended = _get_path(job, kind.suspend_path) is True
    if elastic:
        low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if (low is not None and replicas < low) or (high is not None and replicas > high):
            raise InvalidJobSpecError(field, f"{replicas} is outside the job's elasticPolicy range [{low}, {high}]")
    elif not suspended and not kind.follows_worker_count:
        raise InvalidJobSpecError(
            field,
            f"{_without_elastic_policy(kind)}, or suspend it (SuspendTrainingJobOperator), scale it and resume it "
            "to restart every pod at the new size",
        )
    return _nested(path, replicas)


def _get_path(job: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = job
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``("spec", "runPolicy", "suspend"), True`` -> ``{"spec": {"runPolicy": {"suspend": True}}}``."""
    patch: Any = value
    for part in reversed(path):
        patch = {part: patch}
    return dict(patch)


def suspend_patch(kind: JobKind, suspend: bool) -> dict[str, Any]:
    """Merge patch setting ``suspend`` where the kind keeps it (``spec.runPolicy``; a TrainJob's ``spec``)."""
    return _nested(kind.suspend_path, suspend)
