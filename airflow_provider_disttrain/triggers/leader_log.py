"""The trigger's following of its job's leader log (``stream_logs``), on the cluster the pods run on.

Without MultiKueue that is the job's own cluster, through the shared client of the trigger's watch. A
job Kueue dispatched to a worker cluster (``kueue.dispatch``) has its pods there: they are followed
through the worker's connection (``WorkerClusters``), with the triggerer's one shared client of that
cluster (``WatchRegistry.borrow``: one per cluster, however many jobs run there), while the position is
still saved on the manager's job. A worker cluster no connection maps is said once in the log; nothing
is streamed and the job is still waited for through the manager's mirrored status.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.dispatch import Dispatch
from airflow_provider_disttrain.pods.live_logs import LeaderLogFollower
from airflow_provider_disttrain.triggers.dispatch_finder import DispatchFinder
from airflow_provider_disttrain.utils.clock import Clock
from airflow_provider_disttrain.utils.timeouts import cancel_and_wait

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.shared_watch import Subscription


class LeaderLog:
    """Follows the leader's log of one trigger's job from ``start`` until ``end``."""

    def __init__(
        self,
        ref: JobRef,
        kind: JobKind,
        finder: DispatchFinder,
        log: Any,
        *,
        bytes_per_second: int,
        clock: Clock,
        own: bool = True,
    ) -> None:
        self.ref = ref
        self.own = own
        """Whether a job on its own cluster is followed too (``stream_logs``). A dispatched job's log always
        is: Kueue deletes the worker's pods before the job ends, and their logs with them, so the task's
        ending could copy nothing after the deferral."""
        self.kind = kind
        self.finder = finder
        """Where the job was dispatched (shared with ``worker_pods``)."""
        self.log = log
        self.bytes_per_second = bytes_per_second
        self.clock = clock
        self.dispatch: Dispatch | None = None
        """The worker cluster the job runs on, once known (None: its own cluster)."""
        self._follower: LeaderLogFollower | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        return self._task is not None

    def start(self, subscription: Subscription) -> None:
        """Start following (once): the job runs now (dispatched: a worker may run it)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(subscription))

    async def end(self, save: bool = True) -> None:
        """Stop following, recording where it stopped with ``save`` (``LeaderLogFollower.end``)."""
        task, self._task = self._task, None
        if task is None:
            return
        await cancel_and_wait(task, f"Following the leader's log of {self.ref.title}", self.log)
        if save and self._follower is not None:
            await self._follower.stop()

    async def _run(self, subscription: Subscription) -> None:
        from airflow_provider_disttrain.hooks.watch_registry import registry

        job_cluster = subscription.watch.cluster
        self.dispatch = dispatch = await self.finder.dispatch()
        if dispatch is None:
            if self.own:
                await self._follow(job_cluster, subscription, job_cluster)
        elif not dispatch.mapped:
            self.log.warning("%s", dispatch.note(self.ref.title))
        else:
            self.log.info("%s", dispatch.note(self.ref.title))
            async with registry().borrow(ClusterConnection(conn_id=dispatch.conn_id)) as worker:
                await self._follow(worker, subscription, job_cluster)

    async def _follow(self, cluster: Any, subscription: Subscription, job_cluster: Any) -> None:
        self._follower = LeaderLogFollower(
            cluster,
            self.kind,
            self.ref.name,
            self.ref.namespace,
            self.log,
            subscription.read,
            bytes_per_second=self.bytes_per_second,
            clock=self.clock,
            job_cluster=job_cluster,
        )
        await self._follower.run()
