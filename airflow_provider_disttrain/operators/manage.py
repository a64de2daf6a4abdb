"""Operators that act on an existing training job: delete, scale, suspend and resume it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_disttrain.connection import ClusterConnectionMixin
from airflow_provider_disttrain.exceptions import JobNotFoundError, TrainingJobError
from airflow_provider_disttrain.kinds import get_job_kind
from airflow_provider_disttrain.manifest.patches import current_workers, scale_patch, suspend_patch
from airflow_provider_disttrain.manifest.validation import validate_namespace
from airflow_provider_disttrain.status import job_result

if TYPE_CHECKING:
    from airflow.sdk import Context


class _ExistingJobOperator(ClusterConnectionMixin, BaseOperator):
    """Shared parameters: which job, and how to reach its cluster.

    :param job_name: the job's name (templated; e.g. ``{{ ti.xcom_pull('train', key='job_name') }}``).
    :param kind: job kind from the kinds table (default ``PyTorchJob``).
    :param namespace: the job's namespace (default: the connection's, else ``default``).
    :param kubernetes_conn_id: the cncf.kubernetes connection.
    :param cluster_context: kubeconfig context overriding the connection's.
    :param config_file: kubeconfig file overriding the connection's.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "config_file", "cluster_context")
    ui_color = "#f1f3f4"

    def __init__(
        self,
        *,
        job_name: str,
        kind: str = "PyTorchJob",
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not job_name:
            raise ValueError("job_name: is required")
        self.kind = get_job_kind(kind).kind
        self.job_name = job_name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file

    def resolved_namespace(self) -> str:
        namespace = self.namespace or self.hook.default_namespace()
        validate_namespace(namespace)  # templated: checked here, before the first request
        return namespace

    def title(self) -> str:
        return f"{self.kind} {self.resolved_namespace()}/{self.job_name}"

    def get_existing_job(self) -> dict[str, Any]:
        job = self.hook.get_job(self.kind, self.job_name, self.resolved_namespace())
        if job is None:
            raise JobNotFoundError(f"{self.title()} does not exist")
        return job


class DeleteTrainingJobOperator(_ExistingJobOperator):
    """Delete a job and (through owner references) its pods.

    :param wait_for_deletion: wait until the API server no longer has the job.
    :param ignore_not_found: succeed when the job is already gone (default True).
    :param deletion_timeout: seconds to wait for the deletion.
    """

    def __init__(
        self,
        *,
        wait_for_deletion: bool = True,
        ignore_not_found: bool = True,
        deletion_timeout: float = 300.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.wait_for_deletion = wait_for_deletion
        self.ignore_not_found = ignore_not_found
        self.deletion_timeout = deletion_timeout

    def execute(self, context: Context) -> bool:
        namespace = self.resolved_namespace()
        deleted = self.hook.delete_job(self.kind, self.job_name, namespace)
        if not deleted:
            if not self.ignore_not_found:
                raise JobNotFoundError(f"{self.title()} does not exist")
            self.log.info("%s was already gone", self.title())
            return False
        deadline = time.monotonic() + self.deletion_timeout
        while self.wait_for_deletion and self.hook.get_job(self.kind, self.job_name, namespace) is not None:
            if time.monotonic() > deadline:
                raise TrainingJobError(f"{self.title()} still exists {self.deletion_timeout:.0f}s after deletion")
            time.sleep(1)
        self.log.info("Deleted %s", self.title())
        return True


class ScaleTrainingJobOperator(_ExistingJobOperator):
    """Set the Worker replica count of a job: an elastic PyTorchJob within [min, max], or an MPIJob.

    Any other job is refused while it runs (its pods keep the world size they started with); suspend
    it first, and its pods are recreated at the new size when it is resumed.

    :param replicas: the new number of Worker replicas.
    """

    template_fields: Sequence[str] = (*_ExistingJobOperator.template_fields, "replicas")

    def __init__(self, *, replicas: int | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.replicas = replicas

    def execute(self, context: Context) -> dict[str, Any]:
        kind = get_job_kind(self.kind)
        job = self.get_existing_job()
        replicas = int(self.replicas) if isinstance(self.replicas, str) else self.replicas
        patch = scale_patch(kind, job, replicas)
        previous = current_workers(kind, job)
        self.hook.patch_job(self.kind, self.job_name, self.resolved_namespace(), patch)
        self.log.info("Scaled %s workers from %s to %s", self.title(), previous, replicas)
        return {
            "name": self.job_name,
            "namespace": self.resolved_namespace(),
            "kind": self.kind,
            "previous_replicas": previous,
            "replicas": replicas,
        }


class SuspendTrainingJobOperator(_ExistingJobOperator):
    """Suspend a job (``spec.runPolicy.suspend: true``): the operator deletes its pods, freeing the GPUs."""

    suspend = True

    def execute(self, context: Context) -> dict[str, Any]:
        self.get_existing_job()
        job = self.hook.patch_job(self.kind, self.job_name, self.resolved_namespace(), suspend_patch(self.suspend))
        self.log.info("%s %s", "Suspended" if self.suspend else "Resumed", self.title())
        return job_result(job, self.kind)


class ResumeTrainingJobOperator(SuspendTrainingJobOperator):
    """Resume a suspended job (``spec.runPolicy.suspend: false``); the operator recreates its pods."""

    suspend = False
