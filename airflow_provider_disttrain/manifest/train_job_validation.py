"""Checks of a ``TrainJob`` run before anything is sent to the cluster.

Two parts: ``validate_train_job`` is pure and applies the Trainer v2.3 CRD's schema rules
(manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml) and Kubernetes' own rules for what ends up
in the pods; ``check_against_runtime`` applies what the Trainer's webhook and controller check
against the runtime the job names (pkg/runtime/framework/plugins/jobset/jobset.go ``Validate``), and
what makes the JobSet refuse its pods' names. A TrainJob the controller cannot build stays in the
cluster without pods, so each of these is refused here, naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import TRAINING_RUNTIME_KINDS
from airflow_provider_disttrain.kube.rules import is_dns1123_subdomain
from airflow_provider_disttrain.manifest.pod_validation import MAX_REPLICAS, validate_env, validate_resources
from airflow_provider_disttrain.manifest.train_job import INITIALIZER_STEPS, TRAIN_JOB, TRAINER_STEP
from airflow_provider_disttrain.manifest.validation import (
    _get,
    _require_int,
    _require_mapping,
    _validate_kind,
    pod_name_room,
    replica_counts,
    validate_name,
    validate_namespace,
)

# The CRD's limits (kubebuilder markers in trainjob_types.go).
_MAX_IMAGE = 500
_MAX_ARGV = 128
_MAX_STORAGE_URI = 2048
_MAX_RUNTIME_PATCHES = 16
_MAX_REF_NAME = 253
# DatasetInitializer/ModelInitializer storageUri XValidation: empty, or scheme://...
_STORAGE_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$")
# IsDomainPrefixedPath's path part (k8s.io/apimachinery pkg/util/validation httpPathFmt).
_HTTP_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")
_MANAGED_BY = frozenset({"trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"})
# Containers whose env only the trainer/initializer APIs may set, never a runtime patch.
_ENV_BY_API_ONLY = frozenset({TRAINER_STEP, *INITIALIZER_STEPS.values()})
_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"


def _validate_runtime_ref(spec: Mapping[str, Any]) -> None:
    ref = _require_mapping(spec.get("runtimeRef"), "spec.runtimeRef")
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidJobSpecError("spec.runtimeRef.name", "is required: the runtime to run on (runtime=...)")
    if len(name) > _MAX_REF_NAME:
        raise InvalidJobSpecError("spec.runtimeRef.name", f"must be at most {_MAX_REF_NAME} characters")
    kind = ref.get("kind", "ClusterTrainingRuntime")
    if kind not in TRAINING_RUNTIME_KINDS:
        raise InvalidJobSpecError("spec.runtimeRef.kind", f"{kind!r} is not one of {sorted(TRAINING_RUNTIME_KINDS)}")
    group = ref.get("apiGroup", TRAIN_JOB.resource.group)
    if group != TRAIN_JOB.resource.group:
        raise InvalidJobSpecError("spec.runtimeRef.apiGroup", f"{group!r} is not {TRAIN_JOB.resource.group!r}")


def _validate_argv(value: Any, field: str) -> None:
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidJobSpecError(field, f"must be a list of strings, got {value!r}")
    if len(value) > _MAX_ARGV:
        raise InvalidJobSpecError(field, f"has {len(value)} items; at most {_MAX_ARGV} are allowed")


def _validate_trainer(spec: Mapping[str, Any]) -> None:
    if spec.get("trainer") is None:
        return
    trainer = _require_mapping(spec["trainer"], "spec.trainer")
    image = trainer.get("image")
    if image is not None and (not isinstance(image, str) or not image.strip() or len(image) > _MAX_IMAGE):
        raise InvalidJobSpecError(
            "spec.trainer.image", f"must be a non-empty image name of at most {_MAX_IMAGE} characters"
        )
    for key in ("command", "args"):
        _validate_argv(trainer.get(key), f"spec.trainer.{key}")
    validate_env(trainer.get("env"), "spec.trainer.env")
    for key in ("numNodes", "numProcPerNode"):
        if trainer.get(key) is not None:
            _require_int(trainer[key], f"spec.trainer.{key}", 1, MAX_REPLICAS)
    if trainer.get("resourcesPerNode") is not None:
        validate_resources(trainer["resourcesPerNode"], "spec.trainer.resourcesPerNode")


def _validate_initializer(spec: Mapping[str, Any]) -> None:
    if spec.get("initializer") is None:
        return
    initializer = _require_mapping(spec["initializer"], "spec.initializer")
    for step in INITIALIZER_STEPS:
        if initializer.get(step) is None:
            continue
        field = f"spec.initializer.{step}"
        config = _require_mapping(initializer[step], field)
        uri = config.get("storageUri")
        if uri is not None and (
            not isinstance(uri, str) or len(uri) > _MAX_STORAGE_URI or (uri and not _STORAGE_URI.fullmatch(uri))
        ):
            raise InvalidJobSpecError(
                f"{field}.storageUri", f"{uri!r} is not a URI such as 's3://bucket/path' or 'hf://org/model'"
            )
        validate_env(config.get("env"), f"{field}.env")


def _manager_problem(manager: Any) -> str | None:
    """``IsDomainPrefixedPath``: ``<DNS-1123 subdomain>/<path>``, e.g. ``example.io/platform-team``."""
    host, slash, path = str(manager).partition("/") if isinstance(manager, str) else ("", "", "")
    if not slash or not host or not path or not is_dns1123_subdomain(host) or not _HTTP_PATH.fullmatch(path):
        return f"{manager!r} is not a domain-prefixed path such as 'example.io/platform-team'"
    return None


def _validate_runtime_patches(spec: Mapping[str, Any]) -> None:
    patches = spec.get("runtimePatches")
    if patches is None:
        return
    if not isinstance(patches, list):
        raise InvalidJobSpecError("spec.runtimePatches", f"must be a list, got {type(patches).__name__}")
    if len(patches) > _MAX_RUNTIME_PATCHES:
        raise InvalidJobSpecError("spec.runtimePatches", f"has {len(patches)} entries; at most {_MAX_RUNTIME_PATCHES}")
    managers: set[str] = set()
    for index, patch in enumerate(patches):
        field = f"spec.runtimePatches[{index}]"
        patch = _require_mapping(patch, field)
        manager = patch.get("manager")
        if problem := _manager_problem(manager):
            raise InvalidJobSpecError(f"{field}.manager", problem)
        if manager in managers:
            raise InvalidJobSpecError(f"{field}.manager", f"{manager!r} has two entries; patches are keyed by manager")
        managers.add(str(manager))
        for job_index, job in enumerate(_get(patch, "trainingRuntimeSpec.template.spec.replicatedJobs") or []):
            job_field = f"{field}.trainingRuntimeSpec.template.spec.replicatedJobs[{job_index}]"
            job = _require_mapping(job, job_field)
            if not isinstance(job.get("name"), str) or not job["name"]:
                raise InvalidJobSpecError(f"{job_field}.name", "is required")
            for container in _get(job, "template.spec.template.spec.containers") or []:
                if (
                    isinstance(container, Mapping)
                    and container.get("name") in _ENV_BY_API_ONLY
                    and container.get("env")
                ):
                    raise InvalidJobSpecError(
                        f"{job_field}.template.spec.template.spec.containers[{container['name']}].env",
                        "the trainer and initializer containers' env is set through spec.trainer.env "
                        "(env=...) and spec.initializer, not a runtime patch",
                    )


def _validate_spec_fields(spec: Mapping[str, Any]) -> None:
    if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
        raise InvalidJobSpecError("spec.suspend", f"must be true or false, got {spec['suspend']!r}")
    if spec.get("activeDeadlineSeconds") is not None:
        _require_int(spec["activeDeadlineSeconds"], "spec.activeDeadlineSeconds", 1)
    managed_by = spec.get("managedBy")
    if managed_by is not None and managed_by not in _MANAGED_BY:
        raise InvalidJobSpecError("spec.managedBy", f"{managed_by!r} is not one of {sorted(_MANAGED_BY)}")


def validate_train_job(manifest: Mapping[str, Any]) -> None:
    """Raise ``InvalidJobSpecError`` naming the first field the API server or Trainer would refuse."""
    validate_train_job_spec(manifest)
    validate_name(TRAIN_JOB, manifest)


def validate_train_job_spec(manifest: Mapping[str, Any]) -> None:
    """``validate_train_job`` but for the name (checked before a name is generated for the job)."""
    _validate_kind(TRAIN_JOB, manifest)
    if (namespace := _get(manifest, "metadata.namespace")) is not None:
        validate_namespace(namespace, "metadata.namespace")
    spec = _require_mapping(manifest.get("spec"), "spec")
    _validate_runtime_ref(spec)
    _validate_trainer(spec)
    _validate_initializer(spec)
    _validate_runtime_patches(spec)
    _validate_spec_fields(spec)


def validate_runtime_ref(manifest: Mapping[str, Any]) -> tuple[str, str]:
    """``(runtime kind, name)`` the TrainJob runs on, checked (so it can be looked up)."""
    _validate_kind(TRAIN_JOB, manifest)
    spec = _require_mapping(manifest.get("spec"), "spec")
    _validate_runtime_ref(spec)
    ref = spec["runtimeRef"]
    return str(ref.get("kind", "ClusterTrainingRuntime")), str(ref["name"])


# -- against the runtime ---------------------------------------------------------------------------------


def runtime_steps(runtime: Mapping[str, Any], manifest: Mapping[str, Any]) -> dict[str, int]:
    """The runtime's replicated jobs and how many pods each runs for this TrainJob.

    The trainer step (label ``trainjob-ancestor-step: trainer``) runs the TrainJob's numNodes, else
    the runtime's ``mlPolicy.numNodes``; any other step its Job's parallelism (as Trainer's
    ``newRuntimeInfo`` counts them).
    """
    steps: dict[str, int] = {}
    default_nodes = _get(runtime, "spec.mlPolicy.numNodes")
    nodes = _get(manifest, "spec.trainer.numNodes") or default_nodes or 1
    for job in _get(runtime, "spec.template.spec.replicatedJobs") or []:
        if not isinstance(job, Mapping) or not job.get("name"):
            continue
        ancestor = (_get(job, "template.metadata.labels") or {}).get(_ANCESTOR_LABEL)
        count = nodes if ancestor == "trainer" else _get(job, "template.spec.parallelism") or 1
        steps[str(job["name"])] = int(count) if isinstance(count, int) else 1
    return steps


def name_room(manifest: Mapping[str, Any], runtime: Mapping[str, Any] | None) -> int:
    """Longest TrainJob name whose JobSet pod names (every step of the runtime) stay DNS labels."""
    counts = dict(replica_counts(TRAIN_JOB, manifest))
    if runtime is not None:
        counts.update(runtime_steps(runtime, manifest))
    return pod_name_room(TRAIN_JOB, counts)


def check_against_runtime(
    manifest: Mapping[str, Any], runtime: Mapping[str, Any] | None, fields: Mapping[str, str] | None = None
) -> None:
    """What Trainer checks against the runtime, before the TrainJob exists.

    ``runtime`` is what the API server returned for ``spec.runtimeRef`` (None: it does not exist).
    ``fields`` names the operator parameters that set a field (``{"spec.runtimeRef.name": "runtime"}``),
    so the error names what the DAG author wrote.
    """
    fields = fields or {}
    runtime_kind, name = validate_runtime_ref(manifest)
    if runtime is None:
        runtime_resource = TRAINING_RUNTIME_KINDS[runtime_kind]
        where = f" in namespace {_get(manifest, 'metadata.namespace')!r}" if runtime_resource.namespaced else ""
        raise InvalidJobSpecError(
            fields.get("spec.runtimeRef.name", "spec.runtimeRef.name"),
            f"{runtime_kind} {name!r} does not exist{where} (kubectl get {runtime_resource.plural})",
        )
    steps = runtime_steps(runtime, manifest)
    for step, job_name in INITIALIZER_STEPS.items():
        if _get(manifest, f"spec.initializer.{step}") is not None and job_name not in steps:
            field = f"spec.initializer.{step}"
            raise InvalidJobSpecError(
                fields.get(field, field),
                f"{runtime_kind} {name!r} has no {job_name} step (it has {', '.join(sorted(steps))}); "
                f"use a runtime with one, or leave the {step} to the training code",
            )
    for index, patch in enumerate(_get(manifest, "spec.runtimePatches") or []):
        for job_index, job in enumerate(_get(patch, "trainingRuntimeSpec.template.spec.replicatedJobs") or []):
            if job.get("name") not in steps:
                raise InvalidJobSpecError(
                    f"spec.runtimePatches[{index}].trainingRuntimeSpec.template.spec.replicatedJobs[{job_index}].name",
                    f"{job.get('name')!r} is not a step of {runtime_kind} {name!r} ({', '.join(sorted(steps))})",
                )
    job_name = str(_get(manifest, "metadata.name") or "")
    if len(job_name) > (room := name_room(manifest, runtime)):
        raise InvalidJobSpecError(
            "metadata.name",
            f"{job_name!r} has {len(job_name)} characters; at most {room} fit once JobSet names the pods of "
            f"every step of {runtime_kind} {name!r} ('<name>-<step>-<index>-<node>-xxxxx')",
        )
