"""The operators' ``hook``, built from their connection parameters on first use."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.kueue.dispatch import WorkerClusters


class ClusterConnectionMixin:
    """``hook``: a ``TrainingJobHook`` built from ``kubernetes_conn_id``, ``cluster_context`` and
    ``config_file``, imported on first use so that DAG files importing the operators parse fast."""

    kubernetes_conn_id: str
    cluster_context: str | None
    config_file: str | None
    worker_clusters: Mapping[str, str] | None = None

    @cached_property
    def hook(self) -> TrainingJobHook:
        # Imported here, not at the top: the hook imports the kubernetes client, which a DAG file that
        # only imports an operator must not pay for (bench/import_cost.py).
        from airflow_provider_disttrain.hooks.training_job import TrainingJobHook

        return TrainingJobHook(
            conn_id=self.kubernetes_conn_id, cluster_context=self.cluster_context, config_file=self.config_file
        )

    def worker_cluster_map(self, *, strict: bool = True) -> WorkerClusters:
        """The connections of the MultiKueue worker clusters (``kueue.dispatch``): the rendered
        ``worker_clusters`` first, then the connection's extra of that name; raises naming the field.

        Not ``strict`` (the ending of a job that ran: the mapping was checked before it was submitted, the
        connection may have been edited since), a bad mapping is logged and maps nothing."""
        from airflow_provider_disttrain.hooks.worker_cluster import worker_clusters
        from airflow_provider_disttrain.kueue.dispatch import WorkerClusters

        try:
            return worker_clusters(self.hook, self.worker_clusters)
        except ValueError as error:
            if strict:
                raise
            self.log.warning("No worker cluster is mapped: %s", error)  # type: ignore[attr-defined]
            return WorkerClusters(manager_conn_id=self.hook.conn_id)
