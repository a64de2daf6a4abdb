"""Where Kueue dispatched a trigger's job: found once per trigger, for the two readers of its pods.

MultiKueue dispatches a job once a worker cluster reserves quota for it: its Workload on the manager
then names the worker (``status.clusterName``) and is admitted, and the manager's job is unsuspended.
The worker's pods may run from that moment, and a job that fails at once has them deleted (with the
worker's copy) a second or so after they end, often before the manager's job mirrors ``Running``
(seen on the local two-cluster environment). So the answer is wanted from the dispatch on, not from
when the job is seen running; and the trigger's view cannot tell the dispatch (the shared watch keeps
no spec, ``watch_values.trimmed``, and no controller writes the manager's job's conditions).

So the Workload is read at the first look at the job, and again at each later look (each change of
the job; the dispatch changes it) until the answer is settled: the Workload names a cluster, or it
was admitted without one (no MultiKueue: the job runs where it was submitted), or the job runs or
ended. One LIST on the manager's shared client per look of a job not dispatched yet; none once
settled. The leader's log (``leader_log``) and the kept pods (``worker_pods``) wait for that one answer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.hooks.api_errors import describe_error
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.kueue.dispatch import Dispatch, WorkerClusters, dispatched_to
from airflow_provider_disttrain.kueue.hold import is_admitted, queue_name
from airflow_provider_disttrain.utils.timeouts import cancel_and_wait

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.shared_watch import Subscription
    from airflow_provider_disttrain.job.view import JobView


class DispatchFinder:
    """The worker cluster of one trigger's job, from its Workload, read look by look until settled."""

    def __init__(self, ref: JobRef, workers: WorkerClusters, log: Any) -> None:
        self.ref = ref
        self.workers = workers
        self.log = log
        self._view: JobView | None = None
        self._subscription: Subscription | None = None
        self._looked = asyncio.Event()
        self._answer: asyncio.Future[Dispatch | None] | None = None
        self._task: asyncio.Task[None] | None = None

    def look(self, view: JobView, subscription: Subscription) -> None:
        """Take in one look at the job: start finding (not for a job seen only ended), or read again."""
        self._view, self._subscription = view, subscription
        if self._task is None and not view.is_terminal:
            loop = asyncio.get_running_loop()
            self._answer = loop.create_future()
            self._task = loop.create_task(self._find(self._answer))
        self._looked.set()

    async def dispatch(self) -> Dispatch | None:
        """Where the job runs, once settled: a worker cluster, or None (its own cluster, or unknown)."""
        assert self._answer is not None, "look() first"
        return await asyncio.shield(self._answer)

    async def stop(self) -> None:
        """Stop reading (the trigger ends); whoever still waits for the answer gets None."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task, f"Reading the Kueue Workload of {self.ref.title}", self.log)

    async def _find(self, answer: asyncio.Future[Dispatch | None]) -> None:
        try:
            while True:
                self._looked.clear()
                assert self._view is not None and self._subscription is not None
                dispatch, settled = await self._read(self._view, self._subscription)
                if settled:
                    answer.set_result(dispatch)
                    return
                await self._looked.wait()
        finally:
            if not answer.done():
                answer.set_result(None)

    async def _read(self, view: JobView, subscription: Subscription) -> tuple[Dispatch | None, bool]:
        """One look's answer, and whether it is settled."""
        from airflow_provider_disttrain.hooks.async_training_job import AsyncJobClient

        job = view.job or {}
        uid = self.ref.uid or (job.get("metadata") or {}).get("uid")
        if queue_name(job) is None or not uid:
            return None, True  # no Kueue queue: nothing dispatches it
        try:
            async with subscription.watch.cluster.short_request() as (api, _):
                workload = await AsyncJobClient(api).find_workload(self.ref.namespace, str(uid))
        except Exception as error:
            self.log.warning(
                "Could not read the Kueue Workload of %s to find its worker cluster (%s); reading its pods "
                "on the job's own cluster",
                self.ref.title,
                describe_error(error),
            )
            return None, True
        if (cluster := dispatched_to(workload)) is not None:
            return self.workers.resolve(cluster), True
        admitted_here = workload is not None and is_admitted(workload)
        return None, admitted_here or view.state is JobState.RUNNING or view.is_terminal
