"""What the sensor and the operators acting on an existing job share: which job, and how to reach it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_disttrain.exceptions import JobNotFoundError
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.manifest.validation import validate_namespace
from airflow_provider_disttrain.operators.cluster_hook import ClusterConnectionMixin
from airflow_provider_disttrain.operators.lineage import ExistingJobLineageMixin


class ExistingJobOperator(ExistingJobLineageMixin, ClusterConnectionMixin, BaseOperator):
    """Base of ``TrainingJobSensor`` and the delete, scale, suspend and resume operators.

    A sensor derives from this and ``BaseSensorOperator`` (in that order): the parameters below are
    taken here, the sensor's own ones pass on to it.

    :param job_name: the job's name (templated; e.g. ``{{ ti.xcom_pull('train', key='job_name') }}``).
    :param kind: job kind from the kinds table (default ``PyTorchJob``).
    :param namespace: the job's namespace (default: the connection's, else ``default``).
    :param kubernetes_conn_id: the cncf.kubernetes connection.
    :param cluster_context: kubeconfig context overriding the connection's.
    :param config_file: kubeconfig file overriding the connection's.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "config_file", "cluster_context")

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

    def job_ref(self) -> JobRef:
        return JobRef(self.kind, self.job_name, self.resolved_namespace())

    def title(self) -> str:
        return self.job_ref().title

    def get_existing_job(self) -> dict[str, Any]:
        job = self.hook.get_job(self.kind, self.job_name, self.resolved_namespace())
        if job is None:
            raise JobNotFoundError(f"{self.title()} does not exist")
        return job
