"""The two ways a training task waits for its job: polling from the worker, or deferring to the triggerer.

Both end in the same outcome dict (``outcome``) for the task's ending; the deadlines (``deadlines``)
decide when a wait is over in either. The trigger and the Kueue reporter are imported where they run,
so that DAG files importing an operator stay fast to parse.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.controller_refusal import RefusalLooks, read_refusal, refused
from airflow_provider_disttrain.logs import LogForwarder
from airflow_provider_disttrain.status import JobState, describe_state, has_run, job_state

if TYPE_CHECKING:
    from airflow_provider_disttrain.connection import ClusterConnection
    from airflow_provider_disttrain.deadlines import Deadlines
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.kinds import JobKind
    from airflow_provider_disttrain.outcome import JobRef
    from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger


def trigger_for(
    ref: JobRef,
    deadlines: Deadlines,
    *,
    wait_policy: WaitPolicy,
    cleanup_policy: CleanupPolicy,
    stream_logs: bool,
    gpus_per_replica: dict[str, int],
    connection: ClusterConnection,
) -> TrainingJobTrigger:
    """The trigger that waits for ``ref`` in the triggerer, with the task's deadlines and policies."""
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    return TrainingJobTrigger(
        kind=ref.kind,
        name=ref.name,
        namespace=ref.namespace,
        uid=ref.uid,
        startup_deadline=deadlines.startup,
        queue_deadline=deadlines.queue,
        execution_deadline=deadlines.execution,
        poll_interval=wait_policy.poll_seconds,
        progress_interval=wait_policy.progress_seconds,
        gpus_per_replica=gpus_per_replica,
        delete_on_kill=cleanup_policy.on_kill,
        stream_logs=stream_logs,
        connection=connection,
    )


def poll_until_over(
    hook: TrainingJobHook,
    kind: JobKind,
    ref: JobRef,
    deadlines: Deadlines,
    *,
    poll_interval: float,
    log_replicas: Any,
    log: logging.Logger | Any,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> dict[str, Any]:
    """Poll until the deadlines say the wait is over, copying the chosen replicas' new log lines each time."""
    from airflow_provider_disttrain.hooks.kueue import KueueWaitReporter

    forwarder = LogForwarder(hook, kind, ref.name, ref.namespace, log_replicas, log)
    kueue = KueueWaitReporter(hook, log)
    refusal_looks = RefusalLooks(kind)
    last_state: JobState | None = None
    # Once seen running, a later suspension is not "not started yet" (an MPIJob's conditions can't tell).
    seen_running = False
    while True:
        job = hook.get_job(ref.kind, ref.name, ref.namespace)
        forwarder.forward()
        seen_running = seen_running or (job is not None and has_run(job))
        now = clock()
        waiting_reason = kueue.observe(job)
        if outcome := deadlines.check(
            ref,
            job,
            now=now,
            has_run=seen_running,
            waiting_reason=waiting_reason,
            never_admitted=kueue.never_admitted,
        ):
            forwarder.forward()
            return outcome
        if refusal_looks.due(job, now) and (words := read_refusal(hook, kind, ref, job, log)):
            return refused(ref, job or {}, words)
        state = job_state(job or {})
        if state != last_state:
            log.info("%s is %s", ref.title, describe_state(job or {}))
            last_state = state
        remaining = deadlines.seconds_left(state, now=now, job=job, has_run=seen_running)
        sleep(poll_interval if remaining is None else min(poll_interval, remaining + 0.1))
