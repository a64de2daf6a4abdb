"""Building a Kubeflow Trainer v2 ``TrainJob`` from operator parameters, merged over a user's manifest.

A TrainJob has no replica specs: it names a runtime (``spec.runtimeRef``) whose JobSet template holds
the pods, and overrides the trainer step through ``spec.trainer`` and the initializers through
``spec.initializer``; anything else about the pods goes through ``spec.runtimePatches``. Field names
are Trainer v2.3's (github.com/kubeflow/trainer/v2 pkg/apis/trainer/v1alpha1/trainjob_types.go).

Pure, like ``builder``: parameters win over the base manifest; ``None`` leaves the base untouched.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_provider_disttrain.job.kinds import JobKind, get_job_kind
from airflow_provider_disttrain.manifest.builder import GPU_RESOURCE, _merge_by_name, deep_merge
from airflow_provider_disttrain.manifest.pod_validation import env_entries

TRAIN_JOB: JobKind = get_job_kind("TrainJob")
DEFAULT_RUNTIME_KIND = "ClusterTrainingRuntime"
# The trainer step's replicated job and container in every runtime Trainer ships (constants.Node).
TRAINER_STEP = TRAIN_JOB.worker_replica
# Steps the initializer overrides need in the runtime (constants.DatasetInitializer / ModelInitializer).
INITIALIZER_STEPS = {"dataset": "dataset-initializer", "model": "model-initializer"}
# The runtime patch the provider owns: ``manager`` must be a domain-prefixed path (the JobSet plugin's
# validation.IsDomainPrefixedPath), and patches are keyed by it, beside Kueue's and the user's own.
PATCH_MANAGER = "disttrain.airflow.apache.org/airflow-provider"


@dataclass(frozen=True)
class TrainJobParameters:
    """What ``TrainJobOperator`` lets a DAG author set without writing a manifest. ``None`` means unset."""

    runtime: str | None = None
    runtime_kind: str | None = None
    image: str | None = None
    command: Sequence[str] | None = None
    args: Sequence[str] | None = None
    env: Mapping[str, Any] | Sequence[Mapping[str, Any] | str] | None = None
    num_nodes: int | None = None
    resources_per_node: Mapping[str, Any] | None = None
    gpus_per_node: int | None = None
    dataset_uri: str | None = None
    model_uri: str | None = None
    active_deadline_seconds: int | None = None
    labels: Mapping[str, str] | None = None
    """On the TrainJob and, through the provider's runtime patch, on the trainer step's pods."""
    annotations: Mapping[str, str] | None = None
    """Like ``labels``."""


def _runtime_ref(spec: dict[str, Any], params: TrainJobParameters) -> None:
    if params.runtime is None and params.runtime_kind is None:
        return
    ref = spec.get("runtimeRef")
    ref = dict(ref) if isinstance(ref, Mapping) else {}
    if params.runtime is not None:
        ref["name"] = params.runtime
        # Written out as Kubeflow's examples write them (the CRD defaults the same values).
        ref.setdefault("apiGroup", TRAIN_JOB.resource.group)
        ref.setdefault("kind", DEFAULT_RUNTIME_KIND)
    if params.runtime_kind is not None:
        ref["kind"] = params.runtime_kind
    spec["runtimeRef"] = ref


def _trainer(spec: dict[str, Any], params: TrainJobParameters) -> None:
    fields: dict[str, Any] = {
        "image": params.image,
        "command": list(params.command) if params.command is not None else None,
        "args": list(params.args) if params.args is not None else None,
        "numNodes": params.num_nodes,
    }
    resources: dict[str, Any] = copy.deepcopy(dict(params.resources_per_node or {}))
    if params.gpus_per_node is not None:
        resources.setdefault("limits", {})[GPU_RESOURCE] = params.gpus_per_node
    wanted = {key: value for key, value in fields.items() if value is not None}
    if not wanted and params.env is None and not resources:
        return
    trainer = spec.get("trainer")
    trainer = dict(trainer) if isinstance(trainer, Mapping) else {}
    trainer.update(wanted)
    if params.env is not None:
        trainer["env"] = _merge_by_name(trainer.get("env") or [], env_entries(params.env))
    if resources:
        trainer["resourcesPerNode"] = deep_merge(trainer.get("resourcesPerNode") or {}, resources)
    spec["trainer"] = trainer


def _initializer(spec: dict[str, Any], params: TrainJobParameters) -> None:
    uris = {"dataset": params.dataset_uri, "model": params.model_uri}
    given = {step: uri for step, uri in uris.items() if uri is not None}
    if not given:
        return
    initializer = spec.get("initializer")
    initializer = dict(initializer) if isinstance(initializer, Mapping) else {}
    for step, uri in given.items():
        current = initializer.get(step)
        initializer[step] = {**(dict(current) if isinstance(current, Mapping) else {}), "storageUri": uri}
    spec["initializer"] = initializer


def pod_metadata_patch(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> dict[str, Any]:
    """The provider's ``runtimePatches`` entry putting ``labels``/``annotations`` on the trainer step's pods.

    A runtime patch's pod template may carry labels and annotations (``PodTemplatePatch.metadata``);
    the TrainJob's own metadata does not reach the pods.
    """
    metadata = {key: dict(value) for key, value in (("labels", labels), ("annotations", annotations)) if value}
    pod_template = {"metadata": metadata}
    replicated_job = {"name": TRAINER_STEP, "template": {"spec": {"template": pod_template}}}
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated_job]}}},
    }


def _runtime_patches(spec: dict[str, Any], params: TrainJobParameters) -> None:
    if not params.labels and not params.annotations:
        return
    # The provider's own entry is replaced (a manifest rendered twice, a retry); the others are kept.
    existing = spec.get("runtimePatches")
    if existing is not None and not isinstance(existing, list):
        return  # left for validation to report with the field's path
    kept = [
        patch for patch in existing or [] if not (isinstance(patch, Mapping) and patch.get("manager") == PATCH_MANAGER)
    ]
    spec["runtimePatches"] = [*kept, pod_metadata_patch(params.labels, params.annotations)]


def build_train_job(base: Mapping[str, Any] | None = None, params: TrainJobParameters | None = None) -> dict[str, Any]:
    """A TrainJob manifest: ``base`` (or an empty TrainJob) with ``params`` applied over it."""
    params = params or TrainJobParameters()
    manifest: dict[str, Any] = copy.deepcopy(dict(base)) if base else {}
    manifest.setdefault("apiVersion", TRAIN_JOB.resource.api_version)
    manifest.setdefault("kind", TRAIN_JOB.kind)
    metadata = manifest.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        return manifest  # left for validation to report with the field's path
    if params.labels:
        metadata["labels"] = {**(metadata.get("labels") or {}), **params.labels}
    if params.annotations:
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **params.annotations}
    spec = manifest.setdefault("spec", {})
    if not isinstance(spec, dict):
        return manifest
    _runtime_ref(spec, params)
    _trainer(spec, params)
    _initializer(spec, params)
    if params.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = params.active_deadline_seconds
    _runtime_patches(spec, params)
    return manifest
