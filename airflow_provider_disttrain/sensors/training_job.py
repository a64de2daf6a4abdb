"""``TrainingJobSensor``: wait for an existing training job to finish (poke, reschedule or deferrable)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf

from airflow_provider_disttrain.exceptions import (
    JobFailedError,
    JobInadmissibleError,
    LostContactError,
    TrainingJobError,
    classed_error,
)
from airflow_provider_disttrain.failures.controller_refusal import RefusalLooks, read_refusal, refused
from airflow_provider_disttrain.job import outcome as outcomes
from airflow_provider_disttrain.job.deadlines import Deadlines
from airflow_provider_disttrain.job.gpus import gpus_per_replica
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef, Outcome
from airflow_provider_disttrain.operators.ending import described_failure, diagnosis
from airflow_provider_disttrain.operators.existing_job import ExistingJobOperator
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from airflow_provider_disttrain.utils.clock import SYSTEM, Clock

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_disttrain.hooks.kueue import KueueWaitReporter


class TrainingJobSensor(ExistingJobOperator, BaseSensorOperator):
    """Wait until a training job succeeds; fail, with the reason, when it fails or disappears.

    Returns (to XCom) the same JSON-safe summary as the training operators. Which job and how to reach
    it: ``job_name``, ``kind``, ``namespace``, ``kubernetes_conn_id``, ``cluster_context`` and
    ``config_file``, as for every ``ExistingJobOperator``; the ``BaseSensorOperator`` parameters
    (``poke_interval``, ``timeout``, ``mode``...) apply.

    :param deferrable: wait in the triggerer; defaults to ``[operators] default_deferrable``.
    """

    ui_color = "#e6f4ea"

    def __init__(
        self,
        *,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deferrable = deferrable
        self._kueue_reporter: KueueWaitReporter | None = None
        self._looks: RefusalLooks | None = None  # when to read the job's Warning events (``controller_refusal``)

    clock: Clock = SYSTEM
    """The worker's clock (a test replaces it)."""

    def _ref(self) -> JobRef:
        return self.job_ref()

    def _kueue(self) -> KueueWaitReporter:
        # Kept across pokes of one try (it remembers what it said); imported here, as the hook is.
        from airflow_provider_disttrain.hooks.kueue import KueueWaitReporter

        if self._kueue_reporter is None:
            self._kueue_reporter = KueueWaitReporter(self.hook, self.log, clock=self.clock)
        return self._kueue_reporter

    def poke(self, context: Context) -> PokeReturnValue | bool:
        ref = self._ref()
        job = self.hook.get_job(ref.kind, ref.name, ref.namespace)
        # A job Kueue holds: say why it waits, in Kueue's words, when that changes.
        waiting_reason = self._kueue().observe(job)
        # The sensor's ``timeout`` is BaseSensorOperator's to enforce between pokes: no deadline here.
        outcome = Deadlines().check(
            ref,
            job,
            now=self.clock.wall(),
            waiting_reason=waiting_reason,
            never_admitted=self._kueue().never_admitted,
        )
        if outcome is None and job is not None and (words := self._refusal(ref, job)):
            outcome = refused(ref, job, words)
        if outcome is None:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._result(Outcome.from_event(outcome)))

    def _refusal(self, ref: JobRef, job: dict[str, Any]) -> str | None:
        """The controller's refusal of the job (``controller_refusal``), looked for at most once per interval
        (the looks are kept across pokes of one try, as the Kueue reporter is)."""
        if self._looks is None:
            self._looks = RefusalLooks(get_job_kind(ref.kind))
        if not self._looks.due(job, self.clock.wall()):
            return None
        return read_refusal(self.hook, self._looks.kind, ref, job, self.log)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        ref = self._ref()
        now = self.clock.wall()
        job = self.hook.get_job(ref.kind, ref.name, ref.namespace)
        outcome = Deadlines().check(ref, job, now=now)
        if outcome is not None:
            return self._result(Outcome.from_event(outcome))
        assert job is not None  # a job that is absent is an outcome
        from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

        self.defer(
            trigger=TrainingJobTrigger(
                kind=ref.kind,
                name=ref.name,
                namespace=ref.namespace,
                deadlines=Deadlines.within(self.timeout, now=now),
                # (a poke_interval of 0, which Airflow allows, backs off from the default instead)
                wait_policy=WaitPolicy(poll_interval=float(self.poke_interval) or WaitPolicy.poll_interval),
                gpus_per_replica=gpus_per_replica(job),  # for the GPUs-held gauge, from the job just read
                cleanup_policy=CleanupPolicy(on_kill=False),  # The sensor watches a job it does not own.
                connection=self.hook.trigger_connection(),
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        # The trigger's event, read back through the schema that wrote it (``outcome.Outcome``).
        return self._result(Outcome.from_event(event))

    def _result(self, outcome: Outcome) -> dict[str, Any]:
        """The job's summary when it succeeded, else the error to fail with; either kept for the lineage."""
        try:
            self._lineage_result = self._judge(outcome)
        except Exception as error:
            self.record_failure(error)
            raise
        return self._lineage_result

    def _judge(self, outcome: Outcome) -> dict[str, Any]:
        if outcome.status == outcomes.SUCCESS:
            return dict(outcome.job or {})
        if outcome.status == outcomes.LOST_CONTACT:  # nothing to read from a server that is away
            raise LostContactError(outcome.message)
        ref = JobRef(outcome.kind, outcome.name, outcome.namespace)
        job = self.hook.get_job(ref.kind, ref.name, ref.namespace)
        # The training operators' ending explains and classes the failure (``operators.ending``): a
        # retry_policy treats both alike. Only the cleanup is not the sensor's: it watches a job it does not own.
        message, cause = diagnosis(self.hook, ref, outcome, job, self.log)
        if outcome.status == outcomes.FAILED:
            message, failure = described_failure(message, cause, self.log)
            raise classed_error(JobFailedError, failure, message)
        if outcome.status == outcomes.INADMISSIBLE:  # the job is not the sensor's to delete
            raise JobInadmissibleError(message)
        if outcome.status == outcomes.TIMEOUT:
            from airflow.sdk.exceptions import AirflowSensorTimeout

            raise AirflowSensorTimeout(message)
        raise TrainingJobError(message)
