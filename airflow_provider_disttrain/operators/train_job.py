"""``TrainJobOperator``: a Kubeflow Trainer v2 ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``) on a runtime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_disttrain.job.kinds import TRAINING_RUNTIME_KINDS, get_job_kind
from airflow_provider_disttrain.manifest.loading import load_manifest, template_search_roots
from airflow_provider_disttrain.manifest.pod_validation import MAX_GPUS_PER_REPLICA, MAX_REPLICAS, validate_resources
from airflow_provider_disttrain.manifest.train_job import TrainJobParameters, build_train_job
from airflow_provider_disttrain.manifest.train_job_validation import (
    check_against_runtime,
    name_room,
    validate_runtime_ref,
    validate_train_job,
    validate_train_job_spec,
)
from airflow_provider_disttrain.operators.base import BaseTrainingJobOperator
from airflow_provider_disttrain.parameters import integer_at_least, optional_choice

# Which operator parameter set a TrainJob field, so an error names what the DAG author wrote.
_PARAMETER_FIELDS = {
    "runtime": "spec.runtimeRef.name",
    "dataset_uri": "spec.initializer.dataset",
    "model_uri": "spec.initializer.model",
}


class TrainJobOperator(BaseTrainingJobOperator):
    """Run a Kubeflow Trainer v2 TrainJob on a runtime (``torch-distributed``, ``deepspeed-distributed``...).

    The runtime (a ``ClusterTrainingRuntime``, or a ``TrainingRuntime`` in the job's namespace) holds
    the pods' template; the TrainJob overrides its trainer step: image, command, env, node count and
    resources. Trainer runs it as a JobSet of the same name; node 0 of the trainer step is the leader
    whose log goes to the task log. Describe the job with ``job_manifest`` (as Kubeflow's examples
    write TrainJobs), with the parameters below, or both (parameters win). The runtime must exist: it
    is looked up (one GET) before the TrainJob is submitted.

    The parameters of ``BaseTrainingJobOperator`` apply (naming, ``namespace``, connection, ``image``,
    ``command``, ``args``, ``env``, ``labels``, ``annotations``, ``local_queue``, ``if_exists``,
    ``deferrable``, ``wait_policy``, ``cleanup_policy``, ``log_replicas``, ``server_dry_run``); ``labels``
    and ``annotations`` go on the TrainJob and, through a runtime patch the provider owns, on the
    trainer's pods. What shapes a v1 job's replicas (``num_workers``, ``run_policy``, ``pod_options``...)
    is not a TrainJob's: the runtime sets it, or ``job_manifest``'s ``spec.runtimePatches`` override it.
    In addition:

    :param runtime: the runtime's name (``spec.runtimeRef.name``), e.g. ``torch-distributed``.
    :param runtime_kind: ``ClusterTrainingRuntime`` (default) or ``TrainingRuntime``.
    :param num_nodes: training nodes (``spec.trainer.numNodes``), each one pod of the trainer step.
    :param resources_per_node: container resources of each node (``spec.trainer.resourcesPerNode``).
    :param gpus_per_node: shortcut for ``limits: {nvidia.com/gpu: N}`` in ``resources_per_node``.
    :param dataset_uri: the dataset initializer's ``storageUri`` (e.g. ``hf://org/dataset``); the
        runtime must have a ``dataset-initializer`` step.
    :param model_uri: the model initializer's ``storageUri``; the runtime needs a ``model-initializer`` step.
    :param active_deadline_seconds: the TrainJob's ``spec.activeDeadlineSeconds``.
    """

    kind = "TrainJob"
    template_fields: Sequence[str] = (
        *BaseTrainingJobOperator.template_fields,
        "runtime",
        "dataset_uri",
        "model_uri",
    )

    def __init__(
        self,
        *,
        runtime: str | None = None,
        runtime_kind: str | None = None,
        num_nodes: int | None = None,
        resources_per_node: Mapping[str, Any] | None = None,
        gpus_per_node: int | None = None,
        dataset_uri: str | None = None,
        model_uri: str | None = None,
        active_deadline_seconds: int | None = None,
        **kwargs: Any,
    ) -> None:
        kind = kwargs.pop("kind", None)
        if kind is not None and get_job_kind(kind).kind != type(self).kind:
            raise ValueError(
                f"kind: TrainJobOperator runs TrainJobs, not {kind}s (use TrainingJobOperator(kind={kind!r}))"
            )
        if resources_per_node is not None:
            validate_resources(resources_per_node, "resources_per_node")
        super().__init__(**kwargs)
        self.runtime = runtime
        self.runtime_kind = optional_choice(runtime_kind, tuple(TRAINING_RUNTIME_KINDS), "runtime_kind")
        self.num_nodes = integer_at_least(num_nodes, "num_nodes", maximum=MAX_REPLICAS)
        self.gpus_per_node = integer_at_least(gpus_per_node, "gpus_per_node", minimum=0, maximum=MAX_GPUS_PER_REPLICA)
        self.active_deadline_seconds = integer_at_least(active_deadline_seconds, "active_deadline_seconds")
        self.resources_per_node = resources_per_node
        self.dataset_uri = dataset_uri
        self.model_uri = model_uri
        self._runtimes: dict[tuple[str, str, str], dict[str, Any] | None] = {}

    def train_job_parameters(self) -> TrainJobParameters:
        # ``local_queue`` is not here: the base operator labels every kind's job with it when naming it.
        return TrainJobParameters(
            runtime=self.runtime,
            runtime_kind=self.runtime_kind,
            image=self.image,
            command=self.command,
            args=self.args,
            env=self.env,
            num_nodes=self.num_nodes,
            resources_per_node=self.resources_per_node,
            gpus_per_node=self.gpus_per_node,
            dataset_uri=self.dataset_uri,
            model_uri=self.model_uri,
            active_deadline_seconds=self.active_deadline_seconds,
            labels=self.labels,
            annotations=self.annotations,
        )

    # -- the steps BaseTrainingJobOperator.build_job_manifest leaves to the kind ------------------------

    def assemble_manifest(self) -> dict[str, Any]:
        return build_train_job(
            load_manifest(self.job_manifest, search_roots=template_search_roots(self.get_template_env().loader)),
            self.train_job_parameters(),
        )

    def _runtime(self, manifest: Mapping[str, Any], namespace: str) -> dict[str, Any] | None:
        """The runtime ``spec.runtimeRef`` names, read once per task run (one GET)."""
        runtime_kind, name = validate_runtime_ref(manifest)
        key = (runtime_kind, name, namespace)
        if key not in self._runtimes:
            self._runtimes[key] = self.hook.get_training_runtime(runtime_kind, name, namespace)
        return self._runtimes[key]

    def job_name_room(self, manifest: Mapping[str, Any], namespace: str) -> int:
        validate_train_job_spec(manifest)  # a malformed job is refused before the runtime is read
        return name_room(manifest, self._runtime(manifest, namespace))

    def validate_job_manifest(self, manifest: Mapping[str, Any]) -> None:
        validate_train_job(manifest)
        fields = {
            field: parameter for parameter, field in _PARAMETER_FIELDS.items() if getattr(self, parameter) is not None
        }
        check_against_runtime(manifest, self._runtime(manifest, manifest["metadata"]["namespace"]), fields)
