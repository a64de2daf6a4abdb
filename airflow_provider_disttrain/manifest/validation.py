"""Checks run before anything is sent to the cluster.

The training-operator's validating webhook is often not installed, and the mpi-operator validates
only in its controller (an invalid MPIJob gets a Warning event and never a status), so a job the
operators would reject is created and only its events say why (a wait ends on such an event:
``controller_refusal``). Every rule the operators enforce, and every mistake that silently breaks a
job, is checked here with an error naming the field, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JOB_KINDS, JobKind
from airflow_provider_disttrain.kube.rules import is_dns1035_label, namespace_problem
from airflow_provider_disttrain.manifest.pod_validation import (
    MAX_REPLICAS,
    validate_annotations,
    validate_labels,
    validate_pod_spec,
)
from airflow_provider_disttrain.ownership.naming import MAX_NAME_LENGTH

_CLEAN_POD_POLICIES = frozenset({"All", "Running", "None"})
_NON_NEGATIVE_RUN_POLICY = ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit")


def _get(mapping: Mapping[str, Any], dotted: str) -> Any:
    value: Any = mapping
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _require_mapping(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidJobSpecError(field, f"must be a mapping, got {type(value).__name__}")
    return value


def _require_int(value: Any, field: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJobSpecError(field, f"must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidJobSpecError(field, f"must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidJobSpecError(field, f"must be at most {maximum}, got {value}")
    return value


def replica_counts(kind: JobKind, manifest: Mapping[str, Any]) -> dict[str, int]:
    """Highest replica count each replica type can reach (elastic jobs can grow to maxReplicas).

    A kind without replica specs (TrainJob) has its worker pods' count at ``node_count_path`` (unset:
    the runtime's default, at least 1).
    """
    if not kind.has_replica_specs:
        nodes = _get(manifest, ".".join(kind.worker_replicas_path()))
        valid = isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1
        return {kind.worker_replica: nodes if valid else 1}
    specs = _get(manifest, f"spec.{kind.replica_specs_key}") or {}
    counts = {
        replica_type: replica.get("replicas", 1) if isinstance(replica, Mapping) else 1
        for replica_type, replica in specs.items()
    }
    max_replicas = _get(manifest, "spec.elasticPolicy.maxReplicas")
    if kind.supports_elastic and isinstance(max_replicas, int) and kind.worker_replica in counts:
        counts[kind.worker_replica] = max(counts[kind.worker_replica], max_replicas)
    return {key: value for key, value in counts.items() if isinstance(value, int)}


def pod_name_room(kind: JobKind, counts: Mapping[str, int]) -> int:
    """Longest job name whose pod names (the kind's ``pod_name_suffix`` per replica) stay DNS labels."""
    longest_suffix = max(
        (
            len(kind.pod_name_suffix.format(replica=replica_type.lower(), index=max(count - 1, 0)))
            for replica_type, count in counts.items()
        ),
        default=0,
    )
    return MAX_NAME_LENGTH - longest_suffix


def max_job_name_length(kind: JobKind, manifest: Mapping[str, Any]) -> int:
    """Longest job name whose pod and service names (``<name>-<replica>-<index>``) stay DNS labels."""
    return pod_name_room(kind, replica_counts(kind, manifest))


def validate_name(kind: JobKind, manifest: Mapping[str, Any]) -> None:
    name = _get(manifest, "metadata.name")
    if not isinstance(name, str) or not name:
        raise InvalidJobSpecError("metadata.name", "is required")
    if not is_dns1035_label(name):
        raise InvalidJobSpecError(
            "metadata.name",
            f"{name!r} is not a DNS-1035 label (lower-case letters, digits and '-', starting with a "
            "letter, ending with a letter or digit, at most 63 characters)",
        )
    limit = max_job_name_length(kind, manifest)
    if len(name) > limit:
        raise InvalidJobSpecError(
            "metadata.name",
            f"{name!r} has {len(name)} characters; at most {limit} fit once the operator appends "
            "'-<replica>-<index>' to name pods and services",
        )
    validate_labels(_get(manifest, "metadata.labels"), "metadata.labels")  # TrainJobs' validation calls this too


def _validate_container(kind: JobKind, pod_spec: Mapping[str, Any], field: str) -> None:
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise InvalidJobSpecError(f"{field}.containers", "at least one container is required")
    names = [c.get("name") for c in containers if isinstance(c, Mapping)]
    if kind.requires_named_container and kind.container_name not in names:
        raise InvalidJobSpecError(
            f"{field}.containers",
            f"no container named {kind.container_name!r} (found {names}); the {kind.kind} operator "
            f"only runs the container with that name",
        )
    for index, container in enumerate(containers):
        container = _require_mapping(container, f"{field}.containers[{index}]")
        label = f"{field}.containers[{container.get('name', index)}]"
        if not container.get("name"):
            raise InvalidJobSpecError(f"{label}.name", "is required")
        image = container.get("image")
        if not isinstance(image, str) or not image.strip():
            raise InvalidJobSpecError(f"{label}.image", "is required (set image= or the container's image)")
        for key in ("command", "args"):
            value = container.get(key)
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
                raise InvalidJobSpecError(f"{label}.{key}", f"must be a list of strings, got {value!r}")


def _unknown_replica_type(kind: JobKind, replica_type: str) -> str:
    problem = f"unknown replica type for {kind.kind}; expected one of {sorted(kind.replica_types)}"
    if same := [t for t in kind.replica_types if t.casefold() == str(replica_type).casefold()]:
        problem += f" (did you mean {same[0]!r}? the {kind.kind} operator matches replica types exactly)"
    return problem


def _validate_replicas(kind: JobKind, manifest: Mapping[str, Any]) -> None:
    field = f"spec.{kind.replica_specs_key}"
    specs = _require_mapping(_get(manifest, field), field)
    if not specs:
        raise InvalidJobSpecError(field, "at least one replica spec is required")
    leaders = {kind.leader_replica, *kind.leader_aliases} - {None}
    if len(present := sorted(t for t in specs if kind.canonical_replica_type(t) in leaders)) > 1:
        raise InvalidJobSpecError(field, f"has {' and '.join(present)}: a {kind.kind} has one of them, not both")
    for replica_type, replica in specs.items():
        replica_field = f"{field}.{replica_type}"
        canonical = kind.canonical_replica_type(replica_type)
        if canonical is None:
            raise InvalidJobSpecError(replica_field, _unknown_replica_type(kind, replica_type))
        if canonical != replica_type and canonical in specs:
            raise InvalidJobSpecError(
                replica_field,
                f"is {canonical} written in another case, and {canonical} is given too: the operator "
                "reads replica types case-insensitively and would keep only one of the two",
            )
        replica = _require_mapping(replica, replica_field)
        replicas = _require_int(replica.get("replicas", 1), f"{replica_field}.replicas", 0, MAX_REPLICAS)
        if canonical in leaders and replicas != 1:
            raise InvalidJobSpecError(f"{replica_field}.replicas", f"must be 1, got {replicas}")
        if canonical == kind.worker_replica and replicas < 1:
            raise InvalidJobSpecError(f"{replica_field}.replicas", f"must be at least 1 worker, got {replicas}")
        policy = replica.get("restartPolicy")
        if policy is not None and policy not in kind.restart_policies:
            raise InvalidJobSpecError(
                f"{replica_field}.restartPolicy",
                f"{policy!r} is not allowed for {kind.kind}; expected one of {sorted(kind.restart_policies)}",
            )
        template = _require_mapping(replica.get("template"), f"{replica_field}.template")
        pod_spec = _require_mapping(template.get("spec"), f"{replica_field}.template.spec")
        _validate_container(kind, pod_spec, f"{replica_field}.template.spec")
        validate_pod_spec(pod_spec, f"{replica_field}.template.spec")
        _validate_metadata(template.get("metadata"), f"{replica_field}.template.metadata")
    if kind.leader_required and kind.leader_replica and not present:
        # The mpi-operator would only say so in a Warning event, after the job was created.
        raise InvalidJobSpecError(
            f"{field}.{kind.leader_replica}",
            f"is required: the {kind.kind} operator refuses a job without a {kind.leader_replica}; write it in "
            "job_manifest, or give image= (and command=) to have it built from the parameters",
        )


def _validate_spec_fields(kind: JobKind, manifest: Mapping[str, Any]) -> None:
    spec = manifest.get("spec") or {}
    for dotted, allowed in kind.spec_choices:
        value = _get(spec, dotted)
        if value is not None and value not in allowed:
            raise InvalidJobSpecError(f"spec.{dotted}", f"{value!r} is not one of {sorted(allowed)}")

    run_policy = spec.get("runPolicy")
    if run_policy is not None:
        run_policy = _require_mapping(run_policy, "spec.runPolicy")
        clean = run_policy.get("cleanPodPolicy")
        if clean is not None and clean not in _CLEAN_POD_POLICIES:
            raise InvalidJobSpecError(
                "spec.runPolicy.cleanPodPolicy", f"{clean!r} is not one of {sorted(_CLEAN_POD_POLICIES)}"
            )
        for key in _NON_NEGATIVE_RUN_POLICY:
            if run_policy.get(key) is not None:
                _require_int(run_policy[key], f"spec.runPolicy.{key}", 0)
        min_available = _get(run_policy, "schedulingPolicy.minAvailable")
        if min_available is not None:
            _require_int(min_available, "spec.runPolicy.schedulingPolicy.minAvailable", 1)

    for key, minimum in kind.spec_integer_minimums:
        if key in spec:
            _require_int(spec[key], f"spec.{key}", minimum)

    elastic = spec.get("elasticPolicy")
    if elastic is not None:
        if not kind.supports_elastic:
            raise InvalidJobSpecError("spec.elasticPolicy", f"{kind.kind} does not support elastic training")
        elastic = _require_mapping(elastic, "spec.elasticPolicy")
        low = elastic.get("minReplicas")
        high = elastic.get("maxReplicas")
        if low is not None:
            _require_int(low, "spec.elasticPolicy.minReplicas", 1)
        if high is not None:
            _require_int(high, "spec.elasticPolicy.maxReplicas", 1, MAX_REPLICAS)
        if low is not None and high is not None and low > high:
            raise InvalidJobSpecError("spec.elasticPolicy.minReplicas", f"{low} is greater than maxReplicas {high}")
        workers = _get(spec, f"{kind.replica_specs_key}.{kind.worker_replica}.replicas")
        if isinstance(workers, int) and ((low is not None and workers < low) or (high is not None and workers > high)):
            raise InvalidJobSpecError(
                f"spec.{kind.replica_specs_key}.{kind.worker_replica}.replicas",
                f"{workers} is outside elasticPolicy [{low}, {high}]",
            )
        if elastic.get("maxRestarts") is not None:
            _require_int(elastic["maxRestarts"], "spec.elasticPolicy.maxRestarts", 0)


def validate_namespace(namespace: Any, field: str = "namespace") -> None:
    if problem := namespace_problem(namespace):
        raise InvalidJobSpecError(field, problem)


def _validate_kind(kind: JobKind, manifest: Mapping[str, Any]) -> None:
    given, api_version = manifest.get("kind"), manifest.get("apiVersion")
    if given != kind.kind:
        problem = f"the manifest is a {given!r} ({api_version}), but this operator submits {kind.kind}s"
        if other := JOB_KINDS.get(str(given)):
            problem += f"; submit it with {other.builder_name()}"
        else:
            problem += f"; the provider submits Kubeflow training jobs: {', '.join(JOB_KINDS)}"
        raise InvalidJobSpecError("kind", problem)
    if api_version != kind.resource.api_version:
        raise InvalidJobSpecError(
            "apiVersion", f"{api_version!r} does not match {kind.kind} ({kind.resource.api_version})"
        )


def validate_log_replicas_exist(
    kind: JobKind, manifest: Mapping[str, Any], log_replicas: str | Sequence[str], field: str = "log_replicas"
) -> None:
    """Each replica named in ``log_replicas`` (``worker-1``, ``master``) must be one the job will have."""
    if isinstance(log_replicas, str):
        return  # leader / all / none, checked when the operator was built
    names: set[str] = set()
    described = []
    for replica_type, count in replica_counts(kind, manifest).items():
        canonical = kind.canonical_replica_type(replica_type) or replica_type
        name = kind.replica_label_value(canonical)
        names.add(name)
        if canonical in kind.unindexed_replicas:
            described.append(name)  # e.g. the MPI launcher: its pod has no replica index
            continue
        names.update(f"{name}-{index}" for index in range(count))
        described.append(f"{name}-0" if count == 1 else f"{name}-0 ... {name}-{count - 1}")
    for wanted in log_replicas:
        if str(wanted).lower() not in names:
            raise InvalidJobSpecError(
                field, f"{wanted!r} names no replica of this {kind.kind}; it has {', '.join(sorted(described))}"
            )


def _validate_metadata(metadata: Any, field: str) -> None:
    """Labels and annotations of the job or a pod template, as the API server's ObjectMeta rules."""
    if metadata is None:
        return
    metadata = _require_mapping(metadata, field)
    validate_labels(metadata.get("labels"), f"{field}.labels")
    validate_annotations(metadata.get("annotations"), f"{field}.annotations")


def validate_namespace_agrees(manifest: Mapping[str, Any] | None, namespace: str | None) -> None:
    """A ``namespace`` parameter must not contradict the manifest's ``metadata.namespace``.

    Either may be left out (the other decides); both set and different is refused rather than one
    silently winning.
    """
    written = _get(manifest or {}, "metadata.namespace")
    if namespace is not None and written is not None and written != namespace:
        raise InvalidJobSpecError(
            "namespace",
            f"{namespace!r} contradicts the manifest's metadata.namespace {written!r}: give one of them, or the same",
        )


def validate_manifest(kind: JobKind, manifest: Mapping[str, Any]) -> None:
    """Raise ``InvalidJobSpecError`` naming the first field the operators would reject."""
    if not kind.has_replica_specs:
        raise InvalidJobSpecError("kind", f"a {kind.kind} has no replica specs: submit it with {kind.builder_name()}")
    _validate_kind(kind, manifest)
    if (namespace := _get(manifest, "metadata.namespace")) is not None:
        validate_namespace(namespace, "metadata.namespace")
    _validate_metadata(manifest.get("metadata"), "metadata")
    _require_mapping(manifest.get("spec"), "spec")
    _validate_replicas(kind, manifest)
    _validate_spec_fields(kind, manifest)
    validate_name(kind, manifest)
