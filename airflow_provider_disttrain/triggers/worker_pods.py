"""The trigger's keeping of a MultiKueue-dispatched job's pods, on its worker cluster, until the wait ends.

Kueue deletes the worker's pods as soon as the worker's copy finishes, before the manager's job turns
terminal (``pods.snapshot``): the task's ending, after the trigger fired, would find none. So once Kueue
lets the job go (``JobView.may_have_pods_elsewhere``), the trigger looks up where Kueue dispatched it
(``dispatch_finder``: its Workload) and, on a worker cluster a connection maps, watches the
job's pods there through the triggerer's one shared client of that cluster (``WatchRegistry.borrow``);
its final event carries the trimmed pods it kept (``Outcome.pods``: JSON-safe, at most
``snapshot.MAX_PODS``, messages cut at 4096 bytes). This is independent of ``stream_logs``. A job on its
own cluster (no dispatch) keeps nothing: its pods outlive it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.dispatch import WorkerClusters
from airflow_provider_disttrain.pods.pod_watch import PodWatchTask
from airflow_provider_disttrain.triggers.dispatch_finder import DispatchFinder
from airflow_provider_disttrain.utils.timeouts import cancel_and_wait

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.shared_watch import Subscription
    from airflow_provider_disttrain.job.view import JobView


class WorkerPods:
    """Keeps the pods of one trigger's job on its worker cluster from the first look at it dispatched."""

    def __init__(self, ref: JobRef, workers: Mapping[str, Any] | None, log: Any, *, stream_logs: bool) -> None:
        self.ref = ref
        self.workers = WorkerClusters.from_dict(workers)
        self.log = log
        self.stream_logs = stream_logs
        self.finder = DispatchFinder(ref, self.workers, log)
        """Where the job was dispatched; the leader's log (``leader_log``) waits for its answer too."""
        self._watch = PodWatchTask(get_job_kind(ref.kind), ref.name, ref.namespace, ref.title)
        self._task: asyncio.Task[None] | None = None

    def look(self, view: JobView, subscription: Subscription) -> None:
        """Take in one look at the job: the dispatch is looked for when its pods or its log are wanted, and
        the pods are watched (once started) as soon as a worker may run them
        (``JobView.may_have_pods_elsewhere``), if some worker cluster is mapped (only then can it be read)."""
        if self.workers.maps_any or self.stream_logs:
            self.finder.look(view, subscription)
        if self._task is None and self.workers.maps_any and view.may_have_pods_elsewhere:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def end(self) -> list[dict[str, Any]] | None:
        """Stop watching; the pods kept (for ``Outcome.pods``), None when none."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task, f"Watching the worker pods of {self.ref.title}", self.log)
        await self.finder.stop()
        return self._watch.pods() or None if task is not None else None

    async def _run(self) -> None:
        from airflow_provider_disttrain.hooks.watch_registry import registry

        dispatch = await self.finder.dispatch()
        if dispatch is None or dispatch.conn_id is None:  # its own cluster, or one no connection maps
            return
        async with registry().borrow(ClusterConnection(conn_id=dispatch.conn_id)) as worker:
            await self._watch.run(worker)
