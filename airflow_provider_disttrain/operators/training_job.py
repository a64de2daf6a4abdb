"""``TrainingJobOperator``: a Kubeflow job with replica specs (training-operator v1 kinds, MPIJob).

What these kinds share beyond ``BaseTrainingJobOperator``: Worker replicas, per-replica resources and
restart policy, ``spec.runPolicy`` and the pod template of every replica. ``PyTorchJobOperator`` and
``MPIJobOperator`` fix the kind and add their own ``spec`` fields (``kind_spec_fields``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.manifest.builder import JobParameters, build_manifest
from airflow_provider_disttrain.manifest.loading import load_manifest, template_search_roots
from airflow_provider_disttrain.manifest.pod_validation import (
    MAX_GPUS_PER_REPLICA,
    MAX_REPLICAS,
    validate_resources_parameter,
)
from airflow_provider_disttrain.operators.base import BaseTrainingJobOperator
from airflow_provider_disttrain.parameters import PodOptions, RunPolicy, integer_at_least, require_type


class TrainingJobOperator(BaseTrainingJobOperator):
    """Run a Kubeflow job with replica specs (``PyTorchJob``, ``MPIJob``, ``TFJob``, ``XGBoostJob``,
    ``PaddleJob``, ``JAXJob``): every ``BaseTrainingJobOperator`` parameter, and

    :param kind: the job kind (``PyTorchJobOperator`` and ``MPIJobOperator`` fix theirs; another raises).
    :param num_workers: Worker replicas.
    :param gpus_per_replica: shortcut for ``limits: {nvidia.com/gpu: N}`` on each (GPU-using) replica.
    :param replica_resources: container resources for every replica, or a mapping of replica type to
        resources, e.g. ``{"Worker": {...}, "Launcher": {...}}``.
    :param restart_policy: replica restart policy (Always, OnFailure, Never, ExitCode; MPI: Never, OnFailure).
    :param run_policy: ``spec.runPolicy`` (``RunPolicy``: cleanup of pods, TTL, deadline, backoff, gang
        scheduling).
    :param pod_options: what else goes into every replica's pod template (``PodOptions``: node selector,
        tolerations, volumes, service account, image pull secrets, ``/dev/shm`` size).
    """

    fixed_kind: ClassVar[str | None] = None
    """The one kind a subclass runs (``PyTorchJobOperator``: PyTorchJob); None accepts ``kind=``."""

    def __init__(
        self,
        *,
        kind: str | None = None,
        num_workers: int | None = None,
        gpus_per_replica: int | None = None,
        replica_resources: Mapping[str, Any] | None = None,
        restart_policy: str | None = None,
        run_policy: RunPolicy | None = None,
        pod_options: PodOptions | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kind = self._resolve_kind(kind)
        self.num_workers = integer_at_least(num_workers, "num_workers", maximum=MAX_REPLICAS)
        self.gpus_per_replica = integer_at_least(
            gpus_per_replica, "gpus_per_replica", minimum=0, maximum=MAX_GPUS_PER_REPLICA
        )
        validate_resources_parameter(self.job_kind, replica_resources, "replica_resources")
        self.replica_resources = replica_resources
        self.restart_policy = restart_policy
        require_type(run_policy, RunPolicy, "run_policy")
        require_type(pod_options, PodOptions, "pod_options")
        self.run_policy = run_policy or RunPolicy()
        self.pod_options = pod_options or PodOptions()

    def _resolve_kind(self, kind: str | None) -> str:
        fixed = self.fixed_kind
        if fixed is not None and kind is not None and get_job_kind(kind).kind != fixed:
            raise ValueError(
                f"kind: {type(self).__name__} runs {fixed}s, not {kind}s (use TrainingJobOperator(kind={kind!r}))"
            )
        resolved = get_job_kind(kind or fixed or "PyTorchJob")
        if not resolved.has_replica_specs:
            raise ValueError(f"kind: {resolved.kind} has no replica specs; use its own operator (TrainJobOperator)")
        return resolved.kind

    def kind_spec_fields(self) -> dict[str, Any]:
        """The kind-specific ``spec`` fields the subclass's own parameters set (deep-merged into the spec)."""
        return {}

    def builds_leader(self) -> bool | None:
        """Whether the job gets the kind's leader replica beside the workers (``JobParameters.with_leader``);
        None: the builder's default (a job built from scratch does, a manifest keeps its own choice)."""
        return None

    def job_parameters(self) -> JobParameters:
        return JobParameters(
            image=self.image,
            command=self.command,
            args=self.args,
            env=self.env,
            num_workers=self.num_workers,
            labels=self.labels,
            annotations=self.annotations,
            resources=self.replica_resources,
            gpus_per_replica=self.gpus_per_replica,
            restart_policy=self.restart_policy,
            run_policy=self.run_policy,
            spec_fields=self.kind_spec_fields() or None,
            with_leader=self.builds_leader(),
            pod_options=self.pod_options,
        )

    def assemble_manifest(self) -> dict[str, Any]:
        return build_manifest(
            self.job_kind,
            load_manifest(self.job_manifest, search_roots=template_search_roots(self.get_template_env().loader)),
            self.job_parameters(),
        )

    def ttl_field(self) -> str:
        if self.run_policy.ttl_seconds_after_finished is not None:
            return "run_policy.ttl_seconds_after_finished"
        return super().ttl_field()
