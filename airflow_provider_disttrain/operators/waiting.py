"""The two ways a training task waits for its job: polling from the worker, or deferring to the triggerer.

Both end in the same outcome dict (``outcome``) for the task's ending; the deadlines (``deadlines``)
decide when a wait is over in either, and ``WaitPolicy.api_failure_tolerance`` how long either rides out
an API server it cannot reach before it ends as "lost contact". The trigger and the Kueue reporter are
imported where they run, so that DAG files importing an operator stay fast to parse.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tenacity

from airflow_provider_disttrain.failures.controller_refusal import RefusalLooks, read_refusal, refused
from airflow_provider_disttrain.hooks.api_errors import describe_error
from airflow_provider_disttrain.hooks.faults import Action, classify
from airflow_provider_disttrain.hooks.worker_cluster import locate, pods_hook, queued_workload
from airflow_provider_disttrain.job.outcome import lost_contact
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.job.step import Wake, step
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.pods.logs import LogForwarder
from airflow_provider_disttrain.pods.pod_watch import PodWatchThread

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.job.deadlines import Deadlines
    from airflow_provider_disttrain.job.kinds import JobKind
    from airflow_provider_disttrain.job.outcome import JobRef
    from airflow_provider_disttrain.kube.connection import ClusterConnection
    from airflow_provider_disttrain.kueue.dispatch import WorkerClusters
    from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
    from airflow_provider_disttrain.utils.clock import Clock


def trigger_for(
    ref: JobRef,
    deadlines: Deadlines,
    *,
    wait_policy: WaitPolicy,
    cleanup_policy: CleanupPolicy,
    stream_logs: bool,
    gpus_per_replica: dict[str, int],
    connection: ClusterConnection,
    worker_clusters: WorkerClusters | None = None,
) -> TrainingJobTrigger:
    """The trigger that waits for ``ref`` in the triggerer, with the task's deadlines and policies."""
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    return TrainingJobTrigger(
        kind=ref.kind,
        name=ref.name,
        namespace=ref.namespace,
        uid=ref.uid,
        deadlines=deadlines,
        wait_policy=wait_policy,
        cleanup_policy=cleanup_policy,
        gpus_per_replica=gpus_per_replica,
        stream_logs=stream_logs,
        connection=connection,
        worker_clusters=worker_clusters.to_dict() if worker_clusters is not None else None,
    )


def poll_until_over(
    hook: TrainingJobHook,
    kind: JobKind,
    ref: JobRef,
    deadlines: Deadlines,
    *,
    poll_interval: float,
    api_failure_tolerance: float,
    log_replicas: Any,
    log: logging.Logger | Any,
    clock: Clock,
    worker_clusters: WorkerClusters | None = None,
) -> dict[str, Any]:
    """Poll until the deadlines say the wait is over, copying the chosen replicas' new log lines each time.

    The lines are read where the pods run: with a worker cluster mapped (``worker_clusters``), once the job
    runs (or has ended) a job Kueue queued is looked up once in its Workload, and one MultiKueue dispatched
    is read on its worker cluster, through the connection mapped to it (``hooks.worker_cluster``).

    A read that fails as an outage may (refused, reset, timed out, 429, 5xx: ``faults.classify``) is
    tried again with backoff until ``api_failure_tolerance`` seconds passed since the last read that
    worked; then the wait ends as ``lost_contact`` with the last look at the job. Other errors (401,
    403, a resource type not served) end it at once, as before.
    """
    from airflow_provider_disttrain.hooks.kueue import KueueWaitReporter

    forwarder = LogForwarder(hook, kind, ref.name, ref.namespace, log_replicas, log)
    kueue = KueueWaitReporter(hook, log, clock=clock)
    refusal_looks = RefusalLooks(kind)
    last_state: JobState | None = None
    # The last look at the job; once seen running, a later suspension is not "not started yet" (an
    # MPIJob's conditions can't tell): each view carries that on from the one before.
    view: JobView | None = None
    last_seen_at: float | None = None
    located = worker_clusters is None or not worker_clusters.maps_any  # where the pods run is known (or moot)
    # On a MultiKueue worker, a watch keeps the pods' last states: Kueue deletes them before the manager's
    # job ends (``pods.snapshot``). Stopped, and what it kept handed to the ending, when the wait is over.
    pod_watch: PodWatchThread | None = None

    def read() -> tuple[dict[str, Any] | None, str | None]:
        job = hook.get_job(ref.kind, ref.name, ref.namespace)
        forwarder.forward()  # never raises: logs are a courtesy
        return job, kueue.observe(job)

    try:
        while True:
            reading_since = clock.wall()
            try:
                job, waiting_reason = _ride_out_outages(read, api_failure_tolerance, poll_interval, ref, log, clock)
            except Exception as error:
                if classify(error).action is not Action.RETRY:
                    raise
                waited, seen_at = clock.wall() - reading_since, reading_since if last_seen_at is None else last_seen_at
                last_job = view.job if view is not None else None
                return lost_contact(ref, last_job, waited=waited, last_contact=seen_at, error=describe_error(error))
            last_seen_at = clock.wall()
            view = JobView.observe(
                ref, job, previous=view, waiting_reason=waiting_reason, never_admitted=kueue.never_admitted
            )
            now = clock.wall()
            moved = step(view, deadlines, now)
            if not located and (view.may_have_pods_elsewhere or not isinstance(moved, Wake)):
                assert worker_clusters is not None
                located = True
                forwarder.hook = pods_hook(
                    hook, locate(queued_workload(hook, ref, job, log), worker_clusters, ref, log)
                )
                if forwarder.hook is not None and forwarder.hook is not hook:
                    pod_watch = PodWatchThread(forwarder.hook, kind, ref.name, ref.namespace, ref.title).start()
            if not isinstance(moved, Wake):
                forwarder.forward()
                if pod_watch is not None and (kept := pod_watch.stop()):
                    moved = {**moved, "pods": kept}
                return moved
            if refusal_looks.due(job, now) and (words := read_refusal(hook, kind, ref, job, log)):
                return refused(ref, job or {}, words)
            if view.state != last_state:
                log.info("%s is %s", ref.title, view.describe())
                last_state = view.state
            remaining = moved.seconds_from(now)
            clock.sleep_sync(poll_interval if remaining is None else min(poll_interval, remaining + 0.1))
    finally:  # a refusal, a lost contact or an error: the watch ends with the wait
        if pod_watch is not None:
            pod_watch.stop()


def _ride_out_outages(
    read: Callable[[], Any],
    tolerance: float,
    poll_interval: float,
    ref: JobRef,
    log: logging.Logger | Any,
    clock: Clock,
) -> Any:
    """``read()``, tried again while it fails as an outage, for at most ``tolerance`` seconds on ``clock``.

    The hook's reads retry a few times themselves (``api_errors.retry_transient``, seconds); this is the
    longer wait around them, for an API server that is away for minutes (a control-plane upgrade). On the
    task's injectable clock, so that a test rides out a 15 minute outage in no real time.
    """
    started = clock.wall()

    def warn(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "Cannot reach the API server to read %s for %.0fs (%s); trying again until %.0fs have passed "
            "(wait_policy.api_failure_tolerance)",
            ref.title,
            clock.wall() - started,
            describe_error(error) if error else "?",
            tolerance,
        )

    backoff = tenacity.wait_exponential(multiplier=1, max=max(poll_interval, 1.0))
    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(lambda error: classify(error).action is Action.RETRY),
        stop=lambda state: clock.wall() - started >= tolerance,
        # The last try comes when the tolerance is spent, not a whole backoff step after it.
        wait=lambda state: min(backoff(state), max(0.0, started + tolerance - clock.wall())),
        sleep=clock.sleep_sync,
        before_sleep=warn,
        reraise=True,
    )
    return retrying(read)
