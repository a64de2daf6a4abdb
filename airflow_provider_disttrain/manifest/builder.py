"""Building a job manifest from operator parameters, merged over a user's manifest.

Pure: takes a kind from the table, an optional base manifest and a ``JobParameters``, returns a new
dict. Parameters win over the base manifest; a parameter left as ``None`` leaves the base untouched.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.manifest.pod_validation import (
    env_entries,
    validate_annotations,
    validate_labels,
    validate_string_list,
    validate_tolerations,
)
from airflow_provider_disttrain.parameters import PodOptions, RunPolicy

GPU_RESOURCE = "nvidia.com/gpu"
SHM_VOLUME = "dshm"
_RESOURCE_KEYS = frozenset({"limits", "requests", "claims"})


@dataclass(frozen=True)
class JobParameters:
    """What the operators let a DAG author set without writing a manifest. ``None`` means unset."""

    image: str | None = None
    command: Sequence[str] | None = None
    args: Sequence[str] | None = None
    env: Mapping[str, Any] | Sequence[Mapping[str, Any] | str] | None = None
    """A mapping, a list of ``"NAME=value"`` strings or a list of EnvVar mappings (``env_entries``)."""
    num_workers: int | None = None
    resources: Mapping[str, Any] | None = None
    """Container resources for every replica, or a mapping of replica type to resources."""
    gpus_per_replica: int | None = None
    restart_policy: str | None = None
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    labels: Mapping[str, str] | None = None
    annotations: Mapping[str, str] | None = None
    pod_options: PodOptions = field(default_factory=PodOptions)
    spec_fields: Mapping[str, Any] | None = None
    """Kind-specific ``spec`` fields (elasticPolicy, slotsPerWorker, ...), deep-merged into the spec."""
    with_leader: bool | None = None
    """Whether the job gets the kind's leader replica. True: built from these parameters, also beside a
    manifest without one; False: a job built from scratch gets none (an elastic PyTorchJob); None: a job
    built from scratch gets one, and so does a manifest without the leader its controller requires
    (``JobKind.leader_required``) when ``image`` is given."""


def validate_job_parameters(params: JobParameters) -> None:
    """The builder's parameters whose wrong shape the builder would turn into something else, silently.

    Run by ``build_manifest`` before it applies them; ``validate_pod_spec`` then checks the result.
    """
    for name in ("command", "args"):
        validate_string_list(getattr(params, name), name)
    pod = params.pod_options
    validate_string_list(pod.image_pull_secrets, "pod_options.image_pull_secrets")
    validate_tolerations(pod.tolerations, "pod_options.tolerations")
    validate_labels(params.labels, "labels")
    validate_labels(pod.node_selector, "pod_options.node_selector")
    validate_annotations(params.annotations, "annotations")


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge; ``override`` wins, lists are replaced, ``None`` values are skipped."""
    merged = dict(base)
    for key, value in override.items():
        if value is None:
            continue
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _merge_by_name(existing: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Merge lists of named objects (env, volumes, mounts): a new entry replaces the same-named one."""
    new_names = {item.get("name") for item in new}
    return [dict(item) for item in existing if item.get("name") not in new_names] + [dict(i) for i in new]


def _resources_for(params: JobParameters, replica_type: str, kind: JobKind) -> dict[str, Any] | None:
    resources: dict[str, Any] = {}
    if params.resources:
        if set(params.resources) <= _RESOURCE_KEYS:
            resources = copy.deepcopy(dict(params.resources))
        else:
            by_type = {kind.canonical_replica_type(key) or key: value for key, value in params.resources.items()}
            resources = copy.deepcopy(dict(by_type.get(replica_type) or {}))
    gets_gpus = replica_type != kind.built_leader or kind.builder.leader_gets_accelerators
    if params.gpus_per_replica is not None and gets_gpus:
        resources.setdefault("limits", {})[GPU_RESOURCE] = params.gpus_per_replica
    return resources or None


def canonical_replica_specs(kind: JobKind, specs: Mapping[str, Any]) -> dict[str, Any]:
    """``specs`` keyed as the operator reads them (``worker`` becomes ``Worker`` where it renames keys).

    Submitting the canonical name keeps the builder's parameters on the user's replica and satisfies
    the training-operator's webhook, which compares names exactly. A key whose canonical name is
    taken already stays as written, for validation to report.
    """
    result: dict[str, Any] = {}
    for name, replica in specs.items():
        canonical = kind.canonical_replica_type(name)
        taken = canonical in specs or canonical in result
        result[canonical if canonical and not taken else name] = replica
    return result


def _skeleton(kind: JobKind, params: JobParameters) -> dict[str, Any]:
    replica_specs: dict[str, Any] = {}
    if kind.built_leader and params.with_leader is not False:
        replica_specs[kind.built_leader] = {"replicas": 1, "restartPolicy": kind.builder.restart_policy}
    replica_specs[kind.worker_replica] = {
        "replicas": params.num_workers if params.num_workers is not None else 1,
        "restartPolicy": kind.builder.restart_policy,
    }
    return {
        "apiVersion": kind.resource.api_version,
        "kind": kind.kind,
        "metadata": {},
        "spec": {kind.replica_specs_key: replica_specs},
    }


def _leader_to_build(kind: JobKind, replica_specs: Mapping[str, Any], params: JobParameters) -> str | None:
    """The leader replica a manifest lacks that the parameters build, if any.

    Built when asked for (``with_leader=True``), or when the kind's controller refuses a job without it
    (an MPIJob's Launcher) and ``image`` says what it runs: such a manifest overrides the other
    replicas, and the parameters (an MPIJob's ``command`` is the launcher's) would otherwise be dropped
    with the replica. A leader a valid manifest leaves out on purpose (a PyTorchJob of Workers only,
    an elastic one) is not added unasked. Without ``image`` none is built, and validation names it.
    """
    leader = kind.built_leader
    if leader is None or params.with_leader is False:
        return None
    # Also one in another case (``launcher``), which validation names (the mpi-operator matches exactly).
    leaders = {name.casefold() for name in (leader, *kind.leader_aliases)}
    if any(str(name).casefold() in leaders for name in replica_specs):
        return None
    if params.with_leader or (kind.leader_required and params.image is not None):
        return leader
    return None


def _refuse_dropped_parameters(kind: JobKind, replica_specs: Mapping[str, Any], params: JobParameters) -> None:
    """A parameter that no replica of the built job takes is an error naming it, never silently dropped."""
    present = {kind.canonical_replica_type(name) or name for name in replica_specs}
    if params.resources and not set(params.resources) <= _RESOURCE_KEYS:
        for key in params.resources:
            if (replica := kind.canonical_replica_type(key) or key) not in present:
                raise InvalidJobSpecError(
                    f"replica_resources.{key}",
                    f"names a {replica} replica, and this {kind.kind} has none (it has "
                    f"{', '.join(sorted(present))}): these resources would be dropped",
                )
    leader = kind.built_leader
    if kind.builder.worker_command is not None and leader and not present - {kind.worker_replica}:
        # The kind's workers run the builder's own command (MPI: sshd); only the leader runs the user's.
        for name in ("command", "args"):
            if getattr(params, name) is not None:
                raise InvalidJobSpecError(
                    name,
                    f"would be dropped: a {kind.kind} runs it in its {leader} (its {kind.worker_replica}s "
                    f"serve SSH), and this job has no {leader}; write spec.{kind.replica_specs_key}.{leader} in "
                    "job_manifest, or give image= to have it built from the parameters",
                )


def _main_container(kind: JobKind, pod_spec: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The container the training operator treats as the job's (by name, else for MPI the first one).

    Returns it and whether the builder had to create it.
    """
    containers = pod_spec.setdefault("containers", [])
    for container in containers:
        if container.get("name") == kind.container_name:
            return container, False
    if containers and not kind.requires_named_container:
        return containers[0], False
    if containers:
        # The manifest names its containers, none as the operator expects: a mistake validation
        # reports by name. Adding one here would hide it and run an extra container beside the user's.
        return {}, False
    added: dict[str, Any] = {"name": kind.container_name}
    containers.insert(0, added)
    return added, True


def _apply_to_replica(kind: JobKind, replica_type: str, replica: dict[str, Any], params: JobParameters) -> None:
    # Without restart_policy a replica keeps the manifest's (or, unset, the operator's own default,
    # which differs by kind and replica); only replicas the builder creates get the table's default.
    if params.restart_policy is not None:
        replica["restartPolicy"] = params.restart_policy
    template = replica.setdefault("template", {})
    pod_metadata = template.setdefault("metadata", {})
    if params.labels:
        pod_metadata["labels"] = {**pod_metadata.get("labels", {}), **params.labels}
    if params.annotations:
        pod_metadata["annotations"] = {**pod_metadata.get("annotations", {}), **params.annotations}
    pod_spec = template.setdefault("spec", {})
    container, created = _main_container(kind, pod_spec)

    if params.image is not None:
        container["image"] = params.image
    if kind.builder.worker_command is not None and replica_type == kind.worker_replica:
        # The builder's command is the launcher's (mpirun/horovodrun); workers only serve SSH. A worker
        # from the user's manifest keeps its own command (its image may start sshd by itself).
        if created:
            container["command"] = list(kind.builder.worker_command)
    else:
        if params.command is not None:
            container["command"] = list(params.command)
        if params.args is not None:
            container["args"] = list(params.args)
    if params.env is not None:
        container["env"] = _merge_by_name(container.get("env", []), env_entries(params.env))
    resources = _resources_for(params, replica_type, kind)
    if resources:
        container["resources"] = deep_merge(container.get("resources", {}), resources)
    if kind.builder.port_name and kind.builder.port and not container.get("ports"):
        container["ports"] = [{"name": kind.builder.port_name, "containerPort": kind.builder.port}]

    pod = params.pod_options
    volumes = list(pod.volumes or [])
    mounts = list(pod.volume_mounts or [])
    if pod.shm_size is not None:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": pod.shm_size}})
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if volumes:
        pod_spec["volumes"] = _merge_by_name(pod_spec.get("volumes", []), volumes)
    if mounts:
        container["volumeMounts"] = _merge_by_name(container.get("volumeMounts", []), mounts)
    if pod.node_selector is not None:
        pod_spec["nodeSelector"] = {**pod_spec.get("nodeSelector", {}), **pod.node_selector}
    if pod.tolerations is not None:
        pod_spec["tolerations"] = [dict(t) for t in pod.tolerations]
    if pod.service_account_name is not None:
        pod_spec["serviceAccountName"] = pod.service_account_name
    if pod.image_pull_secrets is not None:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in pod.image_pull_secrets]


def build_manifest(
    kind: JobKind,
    base: Mapping[str, Any] | None = None,
    params: JobParameters | None = None,
) -> dict[str, Any]:
    """A complete job manifest: ``base`` (or a skeleton) with ``params`` applied over it."""
    params = params or JobParameters()
    validate_job_parameters(params)
    manifest = copy.deepcopy(dict(base)) if base else _skeleton(kind, params)
    manifest.setdefault("apiVersion", kind.resource.api_version)
    manifest.setdefault("kind", kind.kind)
    metadata = manifest.setdefault("metadata", {})
    if params.labels:
        metadata["labels"] = {**metadata.get("labels", {}), **params.labels}
    if params.annotations:
        metadata["annotations"] = {**metadata.get("annotations", {}), **params.annotations}

    spec = manifest.setdefault("spec", {})
    replica_specs = spec.setdefault(kind.replica_specs_key, {})
    if not isinstance(replica_specs, dict):
        # Left for validation to report with the field's path.
        return manifest
    replica_specs = spec[kind.replica_specs_key] = canonical_replica_specs(kind, replica_specs)
    if (leader := _leader_to_build(kind, replica_specs, params)) is not None:
        # First, as the builder orders the replicas of a job it makes.
        built = {"replicas": 1, "restartPolicy": kind.builder.restart_policy}
        replica_specs = spec[kind.replica_specs_key] = {leader: built, **replica_specs}
    if params.num_workers is not None:
        worker = replica_specs.setdefault(kind.worker_replica, {"restartPolicy": kind.builder.restart_policy})
        worker["replicas"] = params.num_workers
    for replica_type, replica in replica_specs.items():
        if isinstance(replica, dict):
            _apply_to_replica(kind, replica_type, replica, params)
    _refuse_dropped_parameters(kind, replica_specs, params)

    run_policy = params.run_policy.to_spec()
    if run_policy:
        spec["runPolicy"] = deep_merge(spec.get("runPolicy") or {}, run_policy)
    if params.spec_fields:
        manifest["spec"] = deep_merge(spec, params.spec_fields)
    return manifest


def set_identity(
    manifest: Mapping[str, Any],
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A copy of ``manifest`` with its name, namespace and the task-instance labels (and annotations) set."""
    result = copy.deepcopy(dict(manifest))
    metadata = result.setdefault("metadata", {})
    metadata["name"] = name
    metadata["namespace"] = namespace
    metadata.pop("generateName", None)
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    if annotations:
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    return result
