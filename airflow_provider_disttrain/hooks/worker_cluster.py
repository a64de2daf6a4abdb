"""Following a MultiKueue-dispatched job to its worker cluster, from a worker (the sync wait's ending and
the deferred task's resumption): which cluster runs it, and through which connection (the hook on that
cluster is ``TrainingJobHook.worker_hook``).

The job itself (reads, patches, deletion) stays on the manager: Kueue mirrors the worker's status onto it
and removes the worker's copy when the manager's job goes. Only what exists on the worker alone - pods,
logs, termination messages, events - is read through the worker's hook. See ``kueue.dispatch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.kueue.dispatch import (
    Dispatch,
    WorkerClusters,
    dispatched_to,
    extra_worker_clusters,
    validate_worker_clusters,
)
from airflow_provider_disttrain.kueue.hold import queue_name

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.job.outcome import JobRef
    from airflow_provider_disttrain.utils.clock import Clock

WORKER_COPY_SECONDS = 30.0
"""How long the ending waits for Kueue to remove a deleted job's copy on its worker cluster. MultiKueue
deletes the copy when the manager's Workload goes (its garbage collector, on a timer, sweeps up what a
missed event left): usually seconds; the task is not held longer for a confirmation."""
CHECK_EVERY_SECONDS = 1.0
KILLED_COPY_SECONDS = 4.0
"""How long a killed task (``on_kill``) looks for the worker's copy: Airflow's supervisor SIGKILLs the task
process 5 s after its SIGTERM, and the confirmation must be said before that (the deletion stands either way)."""


def worker_clusters(hook: TrainingJobHook, parameter: Mapping[str, str] | None) -> WorkerClusters:
    """The operator's mapping (rendered) and the manager connection's extra, each validated: an
    ``InvalidJobSpecError`` names the parameter or the connection's extra, before anything is sent."""
    return WorkerClusters(
        validate_worker_clusters(parameter),
        extra_worker_clusters(hook.worker_clusters_extra(), hook.conn_id),
        hook.conn_id,
    )


def queued_workload(
    hook: TrainingJobHook, ref: JobRef, job: Mapping[str, Any] | None, log: Any
) -> dict[str, Any] | None:
    """The Kueue Workload of a job submitted to a LocalQueue (None for any other job: no request). ``job``:
    the job, or the result's summary of it (``local_queue``, ``uid``). One LIST; a courtesy, so a failure
    to read it is logged (and the pods are looked for on the job's own cluster, as without MultiKueue)."""
    job = job or {}
    queued = job.get("local_queue") or queue_name(job)
    uid = job.get("uid") or (job.get("metadata") or {}).get("uid") or ref.uid
    if not queued or not uid:
        return None
    try:
        return hook.find_workload(ref.namespace, str(uid))
    except Exception as error:
        log.warning("Could not read the Kueue Workload of %s: %r", ref.title, error)
        return None


def locate(workload: Mapping[str, Any] | None, clusters: WorkerClusters, ref: JobRef, log: Any) -> Dispatch | None:
    """The worker cluster MultiKueue dispatched the job of ``workload`` to, with its connection (None: the
    job runs on its own cluster), said in the log: where its pods are, or which setting would map it."""
    if (cluster := dispatched_to(workload)) is None:
        return None
    dispatch = clusters.resolve(cluster)
    (log.info if dispatch.mapped else log.warning)("%s", dispatch.note(ref.title))
    return dispatch


def pods_hook(hook: TrainingJobHook, dispatch: Dispatch | None) -> TrainingJobHook | None:
    """The hook of the cluster the job's pods are on: ``hook`` (the job's own cluster), a mapped worker's,
    or None (a worker cluster no connection maps: nothing to read them with)."""
    if dispatch is None:
        return hook
    return hook.worker_hook(dispatch.conn_id) if dispatch.conn_id is not None else None


def mapped_worker(
    hook: TrainingJobHook, ref: JobRef, clusters: WorkerClusters, log: Any
) -> tuple[Dispatch, TrainingJobHook] | None:
    """The mapped worker cluster a job runs on and the hook that reaches it, or None (no mapping, a job
    Kueue did not dispatch, a cluster no connection maps, or a failure to read the job or to reach the
    worker's connection: logged, so that it never stands in the way of the deletion). Read before the
    manager's job is deleted: its Workload, which names the cluster, goes with it."""
    if not clusters.maps_any:
        return None
    try:
        job = hook.get_job(ref.kind, ref.name, ref.namespace)
        dispatch = locate(queued_workload(hook, ref, job, log), clusters, ref, log)
        worker = pods_hook(hook, dispatch)
    except Exception as error:
        log.warning("Could not find the worker cluster of %s: %r", ref.title, error)
        return None
    return None if dispatch is None or worker is None else (dispatch, worker)


def copy_verdict(cluster: str, copy: object, timeout: float, *, expired: bool) -> str | None:
    """Words for the task's message on the worker's copy as last read (``copy``: the job, None when gone,
    or the error reading it), or None: it is still there and ``timeout`` has not ``expired``, look again."""
    if isinstance(copy, Exception):
        return f"Whether its copy on worker cluster {cluster!r} is gone could not be read: {copy!r}"
    if copy is None:
        return f"Its copy on worker cluster {cluster!r} is gone too."
    if expired:
        return (
            f"Its copy on worker cluster {cluster!r} still exists {timeout:.0f}s later: Kueue's MultiKueue "
            "removes it (its garbage collector), or delete it there yourself."
        )
    return None


def confirm_worker_copy_gone(
    worker: TrainingJobHook,
    ref: JobRef,
    cluster: str,
    clock: Clock,
    timeout: float = WORKER_COPY_SECONDS,
) -> str:
    """Whether the job's copy on worker ``cluster`` is gone, after the manager's job was deleted: read by
    name (the copy has a uid of its own) every ``CHECK_EVERY_SECONDS`` for at most ``timeout`` seconds on
    ``clock``. Words for the task's message; never raises (the deletion on the manager stands)."""
    deadline = clock.monotonic() + timeout
    while True:
        copy: object
        try:
            copy = worker.get_job(ref.kind, ref.name, ref.namespace)
        except Exception as error:
            copy = error
        if (said := copy_verdict(cluster, copy, timeout, expired=clock.monotonic() >= deadline)) is not None:
            return said
        clock.sleep_sync(CHECK_EVERY_SECONDS)


def delete_killed_job(hook: TrainingJobHook, ref: JobRef, clusters: WorkerClusters, clock: Clock, log: Any) -> None:
    """A killed task's deletion of its job (``on_kill``) and, for a job MultiKueue runs on a mapped worker
    cluster, whether Kueue removed its copy there, said in the log as a timeout's ending says it."""
    # Where MultiKueue runs it, read first: its Workload, which names the worker, goes with the job.
    worker = mapped_worker(hook, ref, clusters, log)
    if hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid) and worker is not None:
        dispatch, worker_hook = worker
        gone = confirm_worker_copy_gone(worker_hook, ref, dispatch.cluster, clock, KILLED_COPY_SECONDS)
        log.info("%s was deleted. %s", ref.title, gone)
