"""A deferred task's kill: its job deleted on its cluster and, on a MultiKueue worker, its copy looked for.

The trigger's ``on_kill`` (a user marked the deferred task failed, or cleared it) deletes the job it
started. For a job MultiKueue runs on a mapped worker cluster, it then says whether Kueue removed the
job's copy there, as the sync task's ``on_kill`` does (``hooks.worker_cluster.delete_killed_job``); the
Workload that names the worker is read before the deletion, as it goes with the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.hooks.worker_cluster import CHECK_EVERY_SECONDS, KILLED_COPY_SECONDS, copy_verdict
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.dispatch import Dispatch, WorkerClusters, dispatched_to
from airflow_provider_disttrain.kueue.hold import queue_name

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.async_training_job import AsyncJobClient
    from airflow_provider_disttrain.utils.clock import Clock


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
