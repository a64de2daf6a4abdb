"""The trigger's keeping of a MultiKueue-dispatched job's pods, on its worker cluster, until the wait ends.

Kueue deletes the worker's pods as soon as the worker's copy finishes, before the manager's job turns
terminal (``pods.snapshot``): the task's ending, after the trigger fired, would find none. So once the
job runs, the trigger looks up where Kueue dispatched it (``leader_log.find_dispatch``: its Workload)
and, on a worker cluster a connection maps, watches the job's pods there through the triggerer's one
shared client of that cluster (``WatchRegistry.borrow``); its final event carries the trimmed pods it
kept (``Outcome.pods``: JSON-safe, at most ``snapshot.MAX_PODS``, messages cut at 4096 bytes). This is
independent of ``stream_logs``. A job on its own cluster (no dispatch) keeps nothing: its pods outlive it.

And a killed trigger's deletion of its job (``kill_deferred_job``), which looks for the job's copy on
that worker cluster afterwards, as the sync task's ``on_kill`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.hooks.worker_cluster import CHECK_EVERY_SECONDS, KILLED_COPY_SECONDS, copy_verdict
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.dispatch import Dispatch, WorkerClusters, dispatched_to
from airflow_provider_disttrain.kueue.hold import queue_name
from airflow_provider_disttrain.pods.pod_watch import PodWatchTask
from airflow_provider_disttrain.triggers.leader_log import find_dispatch

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.async_training_job import AsyncJobClient
    from airflow_provider_disttrain.hooks.shared_watch import Subscription
    from airflow_provider_disttrain.job.view import JobView
    from airflow_provider_disttrain.utils.clock import Clock


class WorkerPods:
    """Keeps the pods of one trigger's job on its worker cluster from the first look at it running."""

    def __init__(self, ref: JobRef, workers: Mapping[str, Any] | None, log: Any) -> None:
        self.ref = ref
        self.workers = WorkerClusters.from_dict(workers)
        self.log = log
        self._watch = PodWatchTask(get_job_kind(ref.kind), ref.name, ref.namespace, ref.title)
        self._task: asyncio.Task[None] | None = None

    def start(self, view: JobView, subscription: Subscription) -> None:
        """Start (once) when the job runs, if some worker cluster is mapped (only then can it be read)."""
        if self._task is not None or not self.workers.maps_any or view.state is not JobState.RUNNING:
            return
        self._task = asyncio.get_running_loop().create_task(self._run(view.job or {}, subscription))

    async def end(self) -> list[dict[str, Any]] | None:
        """Stop watching; the pods kept (for ``Outcome.pods``), None when none."""
        task, self._task = self._task, None
        if task is None:
            return None
        task.cancel()
        await asyncio.wait({task})
        return self._watch.pods() or None

    async def _run(self, job: Mapping[str, Any], subscription: Subscription) -> None:
        from airflow_provider_disttrain.hooks.watch_registry import registry

        dispatch = await find_dispatch(self.ref, self.workers, job, subscription, self.log)
        if dispatch is None or dispatch.conn_id is None:  # its own cluster, or one no connection maps
            return
        async with registry().borrow(ClusterConnection(conn_id=dispatch.conn_id)) as worker:
            await self._watch.run(worker)


async def kill_deferred_job(
    jobs: AsyncJobClient, ref: JobRef, workers: Mapping[str, Any] | None, clock: Clock, log: Any
) -> None:
    """The trigger's ``on_kill``: delete the job and, for a job MultiKueue runs on a mapped worker cluster,
    say whether Kueue removed its copy there, as the sync task's ``on_kill`` does
    (``hooks.worker_cluster.delete_killed_job``)."""
    kind = get_job_kind(ref.kind)
    # Where MultiKueue runs it, read first: its Workload, which names the worker, goes with the job.
    dispatch = await _mapped_dispatch(jobs, ref, WorkerClusters.from_dict(workers), log)
    if not await jobs.delete_job(kind, ref.name, ref.namespace, ref.uid) or dispatch is None:
        return
    said: str | None  # (a verdict on an error is never None)
    try:
        said = await _look_for_the_copy(ref, dispatch, clock)
    except Exception as error:  # the worker's connection could not be reached: the deletion stands
        said = copy_verdict(dispatch.cluster, error, KILLED_COPY_SECONDS, expired=True)
    log.info("%s was deleted. %s", ref.title, said)


async def _look_for_the_copy(ref: JobRef, dispatch: Dispatch, clock: Clock) -> str:
    """Whether the job's copy on the worker is gone, read every ``CHECK_EVERY_SECONDS`` for at most
    ``KILLED_COPY_SECONDS`` (``hooks.worker_cluster.confirm_worker_copy_gone``, through the async client)."""
    from airflow_provider_disttrain.hooks.async_training_job import AsyncTrainingJobHook

    kind, deadline = get_job_kind(ref.kind), clock.monotonic() + KILLED_COPY_SECONDS
    async with AsyncTrainingJobHook.for_connection(ClusterConnection(conn_id=dispatch.conn_id)).job_client() as worker:
        while True:
            copy: object
            try:
                copy = await worker.get_job(kind, ref.name, ref.namespace)
            except Exception as error:
                copy = error
            expired = clock.monotonic() >= deadline
            if (said := copy_verdict(dispatch.cluster, copy, KILLED_COPY_SECONDS, expired=expired)) is not None:
                return said
            await clock.sleep(CHECK_EVERY_SECONDS)


async def _mapped_dispatch(jobs: AsyncJobClient, ref: JobRef, workers: WorkerClusters, log: Any) -> Dispatch | None:
    """The mapped worker cluster Kueue dispatched the job to (its Workload's), or None: nothing mapped, a
    job without a queue, one not dispatched or to a cluster no connection maps, or a failed read (logged)."""
    if not workers.maps_any:
        return None
    try:
        job = await jobs.get_job(get_job_kind(ref.kind), ref.name, ref.namespace)
        uid = ref.uid or ((job or {}).get("metadata") or {}).get("uid")
        workload = await jobs.find_workload(ref.namespace, str(uid)) if job and queue_name(job) and uid else None
    except Exception as error:
        log.warning("Could not read the Kueue Workload of %s to find its worker cluster: %r", ref.title, error)
        return None
    cluster = dispatched_to(workload)
    dispatch = workers.resolve(cluster) if cluster is not None else None
    return dispatch if dispatch is not None and dispatch.mapped else None
