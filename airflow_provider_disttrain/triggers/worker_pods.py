"""The trigger's keeping of a MultiKueue-dispatched job's pods, on its worker cluster, until the wait ends.

Kueue deletes the worker's pods as soon as the worker's copy finishes, before the manager's job turns
terminal (``pods.snapshot``): the task's ending, after the trigger fired, would find none. So once the
job runs, the trigger looks up where Kueue dispatched it (``leader_log.find_dispatch``: its Workload)
and, on a worker cluster a connection maps, watches the job's pods there through the triggerer's one
shared client of that cluster (``WatchRegistry.borrow``); its final event carries the trimmed pods it
kept (``Outcome.pods``: JSON-safe, at most ``snapshot.MAX_PODS``, messages cut at 4096 bytes). This is
independent of ``stream_logs``. A job on its own cluster (no dispatch) keeps nothing: its pods outlive it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.dispatch import WorkerClusters
from airflow_provider_disttrain.pods.pod_watch import PodWatchTask
from airflow_provider_disttrain.triggers.leader_log import find_dispatch

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.shared_watch import Subscription
    from airflow_provider_disttrain.job.view import JobView


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
