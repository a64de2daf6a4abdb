"""The operators' ``hook``, built from their connection parameters on first use."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook


class ClusterConnectionMixin:
    """``hook``: a ``TrainingJobHook`` built from ``kubernetes_conn_id``, ``cluster_context`` and
    ``config_file``, imported on first use so that DAG files importing the operators parse fast."""

    kubernetes_conn_id: str
    cluster_context: str | None
    config_file: str | None

    @cached_property
    def hook(self) -> TrainingJobHook:
        # Imported here, not at the top: the hook imports the kubernetes client, which a DAG file that
        # only imports an operator must not pay for (bench/import_cost.py).
        from airflow_provider_disttrain.hooks.training_job import TrainingJobHook

        return TrainingJobHook(
            conn_id=self.kubernetes_conn_id, cluster_context=self.cluster_context, config_file=self.config_file
        )
