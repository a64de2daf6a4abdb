"""``TrainingJobSensor``: wait for an existing training job to finish (poke, reschedule or deferrable)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf

from airflow_provider_disttrain import outcome as outcomes
from airflow_provider_disttrain.connection import ClusterConnectionMixin
from airflow_provider_disttrain.exceptions import JobFailedError, TrainingJobError
from airflow_provider_disttrain.kinds import get_job_kind
from airflow_provider_disttrain.manifest.validation import validate_namespace
from airflow_provider_disttrain.outcome import JobRef, check_job

if TYPE_CHECKING:
    from airflow.sdk import Context


class TrainingJobSensor(ClusterConnectionMixin, BaseSensorOperator):
    """Wait until a training job succeeds; fail, with the reason, when it fails or disappears.

    Returns (to XCom) the same JSON-safe summary as the training operators.

    :param job_name: the job's name (templated; e.g. ``{{ ti.xcom_pull('train', key='job_name') }}``).
    :param kind: job kind from the kinds table (default ``PyTorchJob``).
    :param namespace: the job's namespace (default: the connection's, else ``default``).
    :param kubernetes_conn_id: the cncf.kubernetes connection.
    :param cluster_context: kubeconfig context overriding the connection's.
    :param config_file: kubeconfig file overriding the connection's.
    :param deferrable: wait in the triggerer; defaults to ``[operators] default_deferrable``.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "config_file", "cluster_context")
    ui_color = "#e6f4ea"

    def __init__(
        self,
        *,
        job_name: str,
        kind: str = "PyTorchJob",
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
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
        self.deferrable = deferrable

    def _ref(self) -> JobRef:
        namespace = self.namespace or self.hook.default_namespace()
        validate_namespace(namespace)  # templated: checked here, before the first request
        return JobRef(self.kind, self.job_name, namespace)

    def poke(self, context: Context) -> PokeReturnValue | bool:
        ref = self._ref()
        outcome = check_job(ref, self.hook.get_job(ref.kind, ref.name, ref.namespace), now=time.time())
        if outcome is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._result(outcome))

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        ref = self._ref()
        outcome = check_job(ref, self.hook.get_job(ref.kind, ref.name, ref.namespace), now=time.time())
        if outcome is not None:
            return self._result(outcome)
        from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

        timeout = self.timeout.total_seconds() if isinstance(self.timeout, timedelta) else self.timeout
        self.defer(
            trigger=TrainingJobTrigger(
                kind=ref.kind,
                name=ref.name,
                namespace=ref.namespace,
                execution_deadline=time.time() + float(timeout) if timeout else None,
                poll_interval=float(self.poke_interval),
                delete_on_kill=False,  # The sensor watches a job it does not own.
                **self.hook.trigger_connection_args(),
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        return self._result(event)

    def _result(self, outcome: dict[str, Any]) -> dict[str, Any]:
        if outcome["status"] == outcomes.SUCCESS:
            return outcome["job"]
        ref = JobRef(outcome["kind"], outcome["name"], outcome["namespace"])
        job = self.hook.get_job(ref.kind, ref.name, ref.namespace)
        message = self.hook.explain_outcome(ref, outcome["message"], job, logger=self.log)
        if outcome["status"] == outcomes.FAILED:
            raise JobFailedError(message)
        if outcome["status"] == outcomes.TIMEOUT:
            from airflow.sdk.exceptions import AirflowSensorTimeout

            raise AirflowSensorTimeout(message)
        raise TrainingJobError(message)
