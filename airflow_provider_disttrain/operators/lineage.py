"""Lineage of the provider's tasks: OpenLineage facets on start, completion and failure, and the extra of
the Asset events a training task emits for its outlets.

The OpenLineage listener calls ``get_openlineage_facets_on_start/complete/failure`` on the task object
that ran (the openlineage provider's ``DefaultExtractor``). They answer from what the task holds
already (the manifest it built, its job's identity, its result, the explanation it failed with):
never a request to the cluster. Without the openlineage provider (an optional extra) they return
None, and ``lineage_facets``, the one module that imports it, is never imported: DAG files that
import the operators do not pay for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowTaskTimeout

from airflow_provider_disttrain.exceptions import JobFailedError, JobTimeoutError
from airflow_provider_disttrain.lineage.facts import asset_event_extra, initializer_uris, job_facts

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

    from airflow_provider_disttrain.job.kinds import JobKind
    from airflow_provider_disttrain.job.outcome import JobRef


def failure_reason(error: BaseException) -> str:
    """``failed``, ``timeout`` or ``error``: how the task failed, as the failure facet says it."""
    if isinstance(error, JobFailedError):
        return "failed"
    if isinstance(error, (JobTimeoutError, AirflowSensorTimeout, AirflowTaskTimeout)):
        return "timeout"
    return "error"


class LineageMixin:
    """The three OpenLineage methods, answered from ``lineage_job()`` and the ending the task recorded."""

    inlets: list[Any]
    outlets: list[Any]
    kubernetes_conn_id: str
    cluster_context: str | None
    # What the task's ending left for the listener, which asks after ``execute`` returned or raised.
    _lineage_result: dict[str, Any] | None = None
    _lineage_failure: tuple[str, str, dict[str, Any] | None] | None = None

    def lineage_job(self, result: dict[str, Any] | None) -> dict[str, Any] | None:
        """The job facet's content (``lineage.job_facts``), None when there is no job to describe."""
        raise NotImplementedError

    def lineage_input_uris(self) -> list[str]:
        """What the job reads besides the task's inlets (a TrainJob's initializers)."""
        return []

    def lineage_cluster(self, result: Mapping[str, Any] | None = None) -> dict[str, str | None]:
        """Which cluster: the connection id and the kubeconfig context, and the MultiKueue worker cluster the
        job ran on (``workerCluster``, from the ``result``'s ``cluster``). The API server's address is not
        given: it is in the connection, and reading that would be a lookup the lineage must not make."""
        cluster = {"connection": self.kubernetes_conn_id, "context": self.cluster_context}
        if result and result.get("cluster"):
            cluster["workerCluster"] = str(result["cluster"])
        return cluster

    def get_openlineage_facets_on_start(self) -> OperatorLineage | None:
        return self._operator_lineage(None, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage | None:
        return self._operator_lineage(self._lineage_result, None)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> OperatorLineage | None:
        return self._operator_lineage(None, self._lineage_failure)

    def _operator_lineage(
        self, result: dict[str, Any] | None, failure: tuple[str, str, dict[str, Any] | None] | None
    ) -> OperatorLineage | None:
        try:
            from airflow_provider_disttrain.lineage import facets as lineage_facets
        except ImportError:  # the openlineage provider is an optional extra: no lineage without it
            return None
        return lineage_facets.operator_lineage(
            input_uris=self.lineage_input_uris(),
            inlets=self.inlets,
            outlets=self.outlets,
            job=self.lineage_job(result),
            result=result,
            failure=failure,
        )

    def record_failure(self, error: BaseException) -> None:
        # A failed or timed-out job's error carries its failure class (failure_class.py), when known (masked
        # already). The explanation quotes logs and events: masked as the task log masks them.
        from airflow_provider_disttrain.operators.ending import masked

        self._lineage_failure = (failure_reason(error), masked(str(error)), getattr(error, "failure", None))


class TrainingJobLineageMixin(LineageMixin):
    """Lineage of a task that builds and submits a job (every training operator and decorator).

    A success also sets the ``extra`` of the task's Asset events (its Asset outlets: the model it
    writes): the job's identity, its metrics and the model's URI, for a DAG scheduled on the model.
    """

    kind: str
    local_queue: str | None
    job_name: str | None
    namespace: str | None
    _job_ref: JobRef | None
    _lineage_manifest: dict[str, Any] | None = None

    @property
    def job_kind(self) -> JobKind:
        raise NotImplementedError

    def assemble_manifest(self) -> dict[str, Any]:
        raise NotImplementedError

    def _manifest_for_lineage(self) -> dict[str, Any]:
        # The manifest this try built; before ``execute`` (the start event) or in a task resumed from its
        # trigger (a new process), the same manifest unnamed: pure, from the rendered parameters.
        if self._lineage_manifest is None:
            self._lineage_manifest = self.assemble_manifest()
        return self._lineage_manifest

    def remember_manifest(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._lineage_manifest = manifest
        return manifest

    def lineage_input_uris(self) -> list[str]:
        return initializer_uris(self._manifest_for_lineage())

    def lineage_job(self, result: dict[str, Any] | None) -> dict[str, Any]:
        ref, result = self._job_ref, result or {}
        return job_facts(
            self.job_kind,
            self._manifest_for_lineage(),
            name=ref.name if ref else result.get("name") or self.job_name,
            namespace=ref.namespace if ref else result.get("namespace") or self.namespace,
            uid=ref.uid if ref and ref.uid else result.get("uid"),
            cluster=self.lineage_cluster(result),
            local_queue=self.local_queue,
        )

    def record_ending(self, context: Context, finish: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``finish()``'s result, recorded for the lineage; its failure recorded and raised again."""
        try:
            result = finish()
        except Exception as error:
            self.record_failure(error)
            raise
        return self.record_result(context, result)

    def record_result(self, context: Context, result: dict[str, Any]) -> dict[str, Any]:
        """Record a finished job's result, and put it in the ``extra`` of the task's Asset events."""
        self._lineage_result = result
        events = context.get("outlet_events")
        if events is None or result.get("state") != "succeeded":
            return result
        cluster = self.lineage_cluster(result)
        for asset in self.outlets:
            if isinstance(getattr(asset, "uri", None), str):
                accessor = events[asset]
                accessor.extra = {**accessor.extra, **asset_event_extra(result, asset.uri, cluster)}
        return result


class ExistingJobLineageMixin(LineageMixin):
    """Lineage of a task acting on a job it did not build (the sensor, delete/scale/suspend/resume)."""

    kind: str
    job_name: str
    namespace: str | None

    def lineage_job(self, result: dict[str, Any] | None) -> dict[str, Any]:
        from airflow_provider_disttrain.job.kinds import get_job_kind

        result = result or {}
        return job_facts(
            get_job_kind(self.kind),
            None,
            name=result.get("name") or self.job_name,
            namespace=result.get("namespace") or self.namespace,
            uid=result.get("uid"),
            cluster=self.lineage_cluster(),
        )
