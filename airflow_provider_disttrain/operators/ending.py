"""How a training operator's task ends, once the wait is over: the same in sync and deferrable mode.

Given the wait's outcome: copy the logs the wait did not (all of them after a deferral, minus what
the trigger streamed), read the leader's metrics into a success's result and save it for a retry,
delete the job as the ``CleanupPolicy`` says, and otherwise fail the task with an explanation of
what happened to the job (``failure_class.diagnose`` of the pods, container logs and events the hook
reads) and an error whose type says whose failure it was (the training's or the infrastructure's). A
timeout is settled with a fresh look first: a job that finished meanwhile ends the task as it finished. A
wait that lost contact with the API server (``outcome.LOST_CONTACT``) ends the task without reading or deleting.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_disttrain.exceptions import (
    JobFailedError,
    JobInadmissibleError,
    JobTimeoutError,
    LostContactError,
    TrainingJobError,
    classed_error,
)
from airflow_provider_disttrain.failures.diagnostics import Evidence, event_objects, logs_to_read
from airflow_provider_disttrain.failures.failure_class import FailureCause, FailureClass, diagnose
from airflow_provider_disttrain.hooks.worker_cluster import (
    confirm_worker_copy_gone,
    locate,
    pods_hook,
    queued_workload,
)
from airflow_provider_disttrain.job import outcome as outcomes
from airflow_provider_disttrain.job.kinds import JobKind, get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef, Outcome, same_job, settle_timeout
from airflow_provider_disttrain.job.usage import USAGE_ANNOTATION, Usage, describe, job_usage
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kueue.dispatch import Dispatch, WorkerClusters
from airflow_provider_disttrain.kueue.history import describe_record, kueue_record
from airflow_provider_disttrain.kueue.hold import held_by_kueue
from airflow_provider_disttrain.ownership.identity import JobIdentity
from airflow_provider_disttrain.parameters import CleanupPolicy
from airflow_provider_disttrain.pods.live_logs import LOG_POSITION_ANNOTATION, decode_position
from airflow_provider_disttrain.pods.logs import LogForwarder
from airflow_provider_disttrain.pods.metrics import combined_metrics, leader_metrics
from airflow_provider_disttrain.pods.snapshot import gone, with_kept
from airflow_provider_disttrain.utils import telemetry
from airflow_provider_disttrain.utils.clock import SYSTEM, Clock

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook


FAILURE_XCOM_KEY = "failure"
USAGE_COUNTED = "usage_counted"
"""The state store's mark that the job's GPU-seconds were sent (``JobEnding._count_usage``)."""
_T = TypeVar("_T")


def masked(value: _T) -> _T:
    """``value`` with the secrets the task log hides replaced by ``***``.

    The failure's evidence quotes a container's exception line, which can hold a token the training
    printed; the task log masks it, and an XCom (shown in the UI, read by any downstream task) must too.
    The task SDK's masker is the one its log processor (``airflow.sdk.log.mask_logs``) redacts with and
    ``mask_secret`` fills (the connections and variables the task read, the job's sensitive env values).
    """
    try:
        from airflow.sdk._shared.secrets_masker import redact
    except ImportError:  # a task SDK before the masker moved (the openlineage provider falls back alike)
        from airflow.sdk.execution_time.secrets_masker import redact  # type: ignore[no-redef]

    return redact(value)  # type: ignore[return-value]


def publish_failure(failure: dict[str, Any], log: logging.Logger | Any) -> None:
    """XCom ``failure``: the failure's class, reason and evidence (JSON-safe), for a downstream task or a
    callback. The ending is not handed the task's context, so it asks Airflow for the running task's."""
    try:
        from airflow.sdk import get_current_context

        get_current_context()["ti"].xcom_push(key=FAILURE_XCOM_KEY, value=failure)
    except Exception as error:  # outside a running task (or no XCom backend): the exception still carries it
        log.debug("Failure class not pushed to XCom: %r", error)


def diagnosis(
    hook: TrainingJobHook | None,
    ref: JobRef,
    outcome: Outcome,
    job: Mapping[str, Any] | None,
    log: logging.Logger | Any,
    evidence: Evidence | None = None,
) -> tuple[str, FailureCause]:
    """What the job's pods, their failing containers' logs and events say about a wait that did not
    succeed (``outcome``), and whose failure it was: the training operators' ending and the sensor's.
    ``hook``: of the cluster the pods run on (a MultiKueue worker's); None when none reaches it.
    ``evidence``: what the caller already read of them (``hook.collect_evidence``), else read here."""
    if evidence is None:
        evidence = hook.collect_evidence(ref, logger=log) if hook is not None else Evidence()
    return diagnose(get_job_kind(ref.kind), ref.title, outcome.status, outcome.message, job, evidence)


def described_failure(message: str, cause: FailureCause, log: logging.Logger | Any) -> tuple[str, dict[str, Any]]:
    """``message`` with whose failure it was, and the failure (class, reason, evidence) masked and pushed
    to XCom ``failure``: how a failed (or timed-out) wait fails its task, the operators' and the sensor's."""
    # The exception's ``failure`` reaches callbacks and lineage: masked as the XCom is.
    failure = masked(cause.as_dict())
    publish_failure(failure, log)
    return f"{message}\n{cause.describe()}", failure


@dataclass(frozen=True)
class JobEnding:
    """The end of one task's wait for the job ``ref``; ``last_try``: no retry of the task follows."""

    hook: TrainingJobHook
    ref: JobRef
    kind: JobKind
    cleanup: CleanupPolicy
    log_replicas: str | Sequence[str]
    stream_logs: bool
    identity: JobIdentity
    last_try: bool
    log: logging.Logger | Any
    clock: Clock = SYSTEM
    read_from_pods: Callable[[dict[str, Any], list[dict[str, Any]] | None], dict[str, Any]] | None = None
    """What the task adds to a success's result from the pods listed here (None: listing failed), e.g.
    the decorator's return value from the leader's termination message: the pods are listed once."""
    worker_clusters: WorkerClusters | None = None
    """How to reach the worker cluster a MultiKueue-dispatched job runs on (``kueue.dispatch``): its pods,
    logs and events are read there; the job itself is read and deleted on the manager (``hook``)."""

    def finish(self, outcome: Outcome, *, logs_forwarded: bool) -> dict[str, Any]:
        """The task's result for a success; for anything else the error to fail the task with."""
        hook, ref = self.hook, self.ref
        if outcome.status == outcomes.LOST_CONTACT:
            raise self._lost_contact(outcome.message)
        job, other_uid = self._read_own_job() if outcome.status != outcomes.SUCCESS else (None, None)
        if (settled := settle_timeout(ref, outcome, job)) is not outcome:
            self.log.info("%s finished before its timeout was acted on: %s", ref.title, settled.message)
            outcome = settled
        status = outcome.status
        # Kueue's Workload, read once (only for a job it queued): its record, and where MultiKueue runs it.
        workload = queued_workload(hook, ref, job or outcome.job, self.log)
        dispatch = self._dispatch(workload) if other_uid is None else None
        hook_of_pods = pods_hook(hook, dispatch)
        # A success lists the pods, for the leader's metrics and (deferred) its logs (one list serves both).
        pods = self._final_pods(hook_of_pods, outcome.pods) if status == outcomes.SUCCESS else None
        if other_uid is not None:
            self.log.warning(
                "%s now names another job (uid %s, this task's was %s): this task's job is gone; the other's "
                "logs are not copied",
                ref.title,
                other_uid,
                ref.uid,
            )
        elif hook_of_pods is not None and not logs_forwarded:
            forwarder = LogForwarder(hook_of_pods, self.kind, ref.name, ref.namespace, self.log_replicas, self.log)
            if self.stream_logs or (dispatch is not None and dispatch.mapped):  # a worker's: the trigger followed it
                self._resume_after_streamed_lines(forwarder)
            forwarder.forward(pods)
        identity, cleanup = self.identity, self.cleanup
        if status == outcomes.SUCCESS:
            result = self._with_kueue_record(self._with_metrics(dict(outcome.job or {}), pods), workload)
            usage = job_usage(pods, created=result.get("creation_time"), now=self.clock.wall())
            result["usage"] = usage.as_dict()
            if self.read_from_pods is not None:
                result = self.read_from_pods(result, pods)
            if dispatch is not None:
                result.update(dispatch.result(ref.title))
            self.log.info("%s succeeded in %s s (%s)", ref.title, result.get("duration_seconds"), describe(usage))
            # Saved before the job may be deleted: a retry (this worker dying from here on) returns it.
            identity.remember(ref, result=result)
            self._account_usage(usage, result.get("local_queue"), kept=not cleanup.deletes_after(succeeded=True))
            if cleanup.deletes_after(succeeded=True):
                hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid)
            identity.remember(ref, task_succeeded=True)
            return result
        if status == outcomes.INADMISSIBLE:
            raise self._inadmissible(outcome.message, job)
        held: Usage | None = None  # what a failed or timed-out job's pods held
        if other_uid is None:
            evidence = hook_of_pods.collect_evidence(ref, logger=self.log) if hook_of_pods is not None else Evidence()
            evidence = self._with_kept_pods(evidence, hook_of_pods, outcome.pods)
            message, cause = diagnosis(hook_of_pods, ref, outcome, job, self.log, evidence)
            if dispatch is not None:
                message += f"\n{dispatch.note(ref.title)}"
            if status in (outcomes.FAILED, outcomes.TIMEOUT):
                # A job that failed or ran out of time held its GPUs too: from the pods the diagnosis read.
                created = (outcome.job or {}).get("creation_time")
                held = job_usage(evidence.pods or None, created=created, now=self.clock.wall())
                self.log.info("%s held %s", ref.title, describe(held))
        else:  # the pods, logs and events under the name are the other job's: they explain nothing here
            message = (
                f"{outcome.message}\n{ref.title} now names another job (uid {other_uid}), created since: "
                f"this task's job (uid {ref.uid}) is gone"
            )
            cause = FailureCause(FailureClass.UNKNOWN, "this task's job is gone; its name holds another job")
        if job is not None and (record := self._kueue_record(workload)):
            message += f"\n{describe_record(record)}"
        if status in (outcomes.FAILED, outcomes.TIMEOUT):
            message, failure = described_failure(message, cause, self.log)
        queue = (outcome.job or {}).get("local_queue")
        if status == outcomes.FAILED:
            if held is not None:
                self._account_usage(held, queue, kept=not cleanup.deletes_after(succeeded=False))
            if cleanup.deletes_after(succeeded=False):
                hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid)
            raise classed_error(JobFailedError, failure, message)
        if status == outcomes.TIMEOUT:
            if held is not None:  # counted until now: a job the policy keeps running is not counted again
                self._account_usage(held, queue, kept=False)
            # (The uid precondition fails, False, when the name holds another job now: not said deleted.)
            if job is not None and held_by_kueue(job):
                # Left in the queue, it would take quota later for a task that has failed.
                if hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid):
                    message += f"\n{ref.title} was deleted: it was still queued by Kueue."
            elif cleanup.on_timeout and hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid):
                message += f"\n{ref.title} was deleted (cleanup_policy.on_timeout=True)."
                message += self._worker_copy(dispatch, hook_of_pods)
            raise classed_error(JobTimeoutError, failure, message)
        if (
            job is not None
            and not JobView.observe(ref, job).is_terminal
            and self.last_try
            # Nothing will come back for this job: a later try would have reattached to it. The uid
            # precondition fails (False) when the job under this name is someone else's now.
            and hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid)
        ):
            message += f"\n{ref.title} was deleted: this was the task's last try."
            message += self._worker_copy(dispatch, hook_of_pods)
        raise TrainingJobError(message)

    def _account_usage(self, usage: Usage, queue: str | None, *, kept: bool) -> None:
        """Count the job's GPU-seconds (once per job) and, on a job that stays (``kept``), record them."""
        self._count_usage(usage, queue)
        if kept:
            self._annotate_usage(usage)

    def _count_usage(self, usage: Usage, queue: str | None) -> None:
        """Send the job's GPU-seconds once per job: a retry that takes the finished job over (its task died
        after this) finds the mark in the state store and does not count it again. Marked before it is
        sent: a death between the two loses one count rather than doubling it. (Without a state store,
        a retry that reaches this ending again counts again.)"""
        if usage.gpu_seconds is None or self.identity.recorded(self.ref, USAGE_COUNTED):
            return
        self.identity.remember(self.ref, **{USAGE_COUNTED: True})
        telemetry.gpu_seconds(usage.gpu_seconds, namespace=self.ref.namespace, queue=queue)

    def _annotate_usage(self, usage: Usage) -> None:
        """Record the usage on the job kept (``usage.USAGE_ANNOTATION``), where the Training jobs page reads
        it without listing pods per job. A courtesy: a refused patch never fails the task. The uid in the
        patch is a precondition: a job created under the name since is not annotated."""
        ref = self.ref
        patch = {"metadata": {"uid": ref.uid, "annotations": {USAGE_ANNOTATION: usage.annotation()}}}
        if ref.uid is None:
            del patch["metadata"]["uid"]
        try:
            self.hook.patch_job(ref.kind, ref.name, ref.namespace, patch)
        except Exception as error:
            self.log.warning("Could not record the GPU usage on %s (the jobs page shows none): %r", ref.title, error)

    def _lost_contact(self, message: str) -> LostContactError:
        """Losing the API server (a control-plane upgrade, a network partition) says nothing about the job,
        last seen unfinished: it is not deleted whatever the cleanup policy or the try, and nothing more is
        read (the server may still be away; the logs stay on the pods)."""
        return LostContactError(
            f"{message}\n{self.ref.title} was NOT deleted: losing contact with the API server says nothing "
            "about the job. A retry of this task reattaches to it; without one, delete it yourself if it "
            "should not go on."
        )

    def _read_own_job(self) -> tuple[dict[str, Any] | None, str | None]:
        """The job this task waited for, read by name: ``(job, None)``, ``(None, None)`` when gone, and
        ``(None, its uid)`` when the name holds another job (``outcome.same_job``): gone for this task."""
        ref = self.ref
        found = self.hook.get_job(ref.kind, ref.name, ref.namespace)
        if found is not None and same_job(ref, found) is None:
            return None, str((found.get("metadata") or {}).get("uid"))
        return found, None

    def _inadmissible(self, message: str, job: Mapping[str, Any] | None) -> JobInadmissibleError:
        """Kueue can never admit the job: it is deleted whatever the cleanup policy (it never ran, and left
        in the queue it would take the quota later for a task that has failed)."""
        ref = self.ref
        if job is not None and self.hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid):
            message += f"\n{ref.title} was deleted: Kueue can never admit it as its queues stand."
        return JobInadmissibleError(message)

    def _fresh_job(self) -> dict[str, Any] | None:
        """A fresh look at the job, None when it is gone or its name now holds another job (another uid
        than the one this task instance submitted or took over: it neither settles a timeout nor is
        explained, kept or deleted as this task's job)."""
        ref = self.ref
        job = self.hook.get_job(ref.kind, ref.name, ref.namespace)
        if job is not None and ref.uid is not None and (job.get("metadata") or {}).get("uid") != ref.uid:
            self.log.warning(
                "%s is another job now (uid %s, not %s): left alone", ref.title, job["metadata"].get("uid"), ref.uid
            )
            return None
        return job

    def _resume_after_streamed_lines(self, forwarder: LogForwarder) -> None:
        """Copy only what the trigger did not stream: it left its position on the job (``live_logs``)."""
        job = self._fresh_job()
        annotations = ((job or {}).get("metadata") or {}).get("annotations") or {}
        if (position := decode_position(annotations.get(LOG_POSITION_ANNOTATION))) is not None:
            forwarder.resume_from(*position)

    def _dispatch(self, workload: Mapping[str, Any] | None) -> Dispatch | None:
        """The worker cluster MultiKueue runs the job on (None: the manager runs it), for a task given the
        mappings (``worker_clusters``)."""
        if self.worker_clusters is None:
            return None
        return locate(workload, self.worker_clusters, self.ref, self.log)

    def _worker_copy(self, dispatch: Dispatch | None, worker: TrainingJobHook | None) -> str:
        """After the manager's job was deleted: whether its copy on the worker is gone too (Kueue removes
        it), for the message; '' for a job that ran on the manager, or on a worker no connection maps."""
        if dispatch is None or worker is None:
            return ""
        return "\n" + confirm_worker_copy_gone(worker, self.ref, dispatch.cluster, self.clock)

    def _final_pods(
        self, hook: TrainingJobHook | None, kept: Sequence[Mapping[str, Any]] | None
    ) -> list[dict[str, Any]] | None:
        """The job's pods now, with those the wait's watch kept that are gone since (``Outcome.pods``:
        MultiKueue deletes a worker's pods before the manager's job ends), said in the log."""
        ref = self.ref
        if hook is None:
            return None
        try:
            listed: list[dict[str, Any]] | None = hook.list_job_pods(ref.name, ref.namespace, kind=self.kind)
        except Exception as error:  # metrics and logs are a courtesy: the job succeeded
            self.log.warning("Could not list the pods of %s (no metrics in the result): %r", ref.title, error)
            listed = None
        if missing := gone(listed, kept):
            self.log.info("%s: pods gone from the cluster, read as the wait last saw them: %s", ref.title, missing)
        return with_kept(listed, kept)

    def _with_kept_pods(
        self, evidence: Evidence, hook: TrainingJobHook | None, kept: Sequence[Mapping[str, Any]] | None
    ) -> Evidence:
        """A failure's ``evidence`` with the pods the wait's watch kept that are gone since (MultiKueue
        deleted them on the worker): their last states, the Warning events about them (events outlive
        their pods), and in place of a failing container's lines, that its log went with its pod."""
        if hook is None or not (missing := gone(evidence.pods, kept)):
            return evidence
        ref, kind = self.ref, get_job_kind(self.ref.kind)
        pods = tuple(with_kept(evidence.pods, kept) or ())
        try:
            events = tuple(hook.list_warning_events(ref.namespace, event_objects(kind, ref.name, pods)))
        except Exception as error:  # the kept pods' states still explain more than nothing
            self.log.warning("Could not read the Warning events of %s: %r", ref.title, error)
            events = evidence.events
        tails = dict(evidence.log_tails)
        for pod_name, _container, _previous in logs_to_read(pods):
            if pod_name in missing:
                tails[pod_name] = "(no log: the pod was deleted with the job's copy on its cluster, by Kueue)"
        return Evidence(pods, events, tails)

    def _kueue_record(self, workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """What Kueue did to the job (evictions, seconds queued and admitted), from its Workload."""
        return kueue_record(workload, now=self.clock.wall()) if workload is not None else None

    def _with_kueue_record(self, result: dict[str, Any], workload: Mapping[str, Any] | None) -> dict[str, Any]:
        if (record := self._kueue_record(workload)) is None:
            return result
        self.log.info("%s: %s", self.ref.title, describe_record(record))
        return {**result, "kueue": record}

    def _with_metrics(self, result: dict[str, Any], pods: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
        """The result with the leader's metrics (its termination message as a JSON object), when it wrote any,
        and a TrainJob trainer's reported ``trainerStatus.metrics`` (the leader's win a name both have)."""
        leader, why = leader_metrics(self.kind, pods) if pods is not None else (None, "")
        if leader is None and why:
            self.log.info("No training metrics from the leader's termination message: %s", why)
        elif leader is not None:
            self.log.info("Training metrics from the leader: %s", json.dumps(leader, sort_keys=True))
        if (metrics := combined_metrics(leader, result.get("trainer_status"))) is None:
            return result
        if metrics != leader:
            self.log.info("Training metrics in the result: %s", json.dumps(metrics, sort_keys=True))
        return {**result, "metrics": metrics}
