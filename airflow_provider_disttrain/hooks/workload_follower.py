"""A trigger's follower of the Kueue Workload of its job, while Kueue holds the job (the triggerer's side).

Through the loop's shared watch of Workloads (``hooks.shared_watch``) and its shared poller of
LocalQueue positions (``hooks.queue_positions``). A worker that polls asks with
``TrainingJobHook.find_workload`` instead (``hooks.kueue``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.hooks.api_errors import describe_error
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.admission import NeverAdmitted
from airflow_provider_disttrain.kueue.estimate import WaitEstimate
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, WORKLOAD, held_by_kueue, queue_name
from airflow_provider_disttrain.kueue.position import QueuePosition
from airflow_provider_disttrain.kueue.waiting import kueue_word, position_wanted, workload_unreadable_warning

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.queue_positions import LocalQueuePositions
    from airflow_provider_disttrain.hooks.shared_watch import Subscription


class WorkloadFollower:
    """One trigger's subscription to the Kueue Workload of its job, open only while Kueue holds the job.

    Workloads are followed through one shared watch per (cluster, namespace), selecting every Workload
    that has Kueue's ``job-uid`` label and indexed on it (Kueue names a Workload itself). A job without
    the queue label, or one Kueue has admitted, opens none: clusters without Kueue see no extra request.
    A Workload that cannot be read (403: the Role lacks the verbs; 404: Kueue is not installed) is
    reported once and not asked for again; the job is still waited for.
    """

    def __init__(self) -> None:
        self._context: contextlib.AbstractAsyncContextManager[Subscription] | None = None
        self._subscription: Subscription | None = None
        self._unreadable = False
        self._positions_context: contextlib.AbstractAsyncContextManager[LocalQueuePositions] | None = None
        self._positions: LocalQueuePositions | None = None
        self.never_admitted: NeverAdmitted | None = None
        """Kueue's word that it can never admit the job (``kueue_admission``), from the last ``follow``."""

    async def follow(
        self,
        job: Mapping[str, Any] | None,
        connection: ClusterConnection,
        job_subscription: Subscription,
        options: Mapping[str, Any],
        log: Any,
    ) -> str | None:
        """Kueue's message for ``job`` while Kueue holds it (None otherwise, or while not known yet).

        The Workload's changes wake the trigger through its job subscription's event.
        """
        self.never_admitted = None
        if job is None or not held_by_kueue(job) or self._unreadable:
            await self.stop()
            return None
        if self._subscription is None:
            from airflow_provider_disttrain.hooks.watch_registry import subscribe

            metadata = job["metadata"]
            self._context = subscribe(
                connection,
                WORKLOAD,
                metadata["namespace"],
                metadata["uid"],
                label_selector=JOB_UID_LABEL,
                index_label=JOB_UID_LABEL,
                changed=job_subscription.changed,
                **options,
            )
            self._subscription = await self._context.__aenter__()
        problem = self._subscription.problem
        if problem is not None and (problem.fatal or problem.denied):
            self._unreadable = True
            title = f"{job.get('kind')} {job['metadata'].get('name')}"
            log.warning("%s", workload_unreadable_warning(title, describe_error(problem.error)))
            await self.stop()
            return None
        if not self._subscription.synced:
            return None
        entry = self._subscription.entry
        workload = entry.job if entry is not None and not entry.deleted else None
        position = wait = None
        if workload is not None and (name := position_wanted(workload)) is not None:
            position = await self._position(job, name, connection, job_subscription)
            wait = self._estimate(job, position)
        # Without the waited time: the line changes only when the job moves in the queue.
        word = kueue_word(workload, position, wait=wait)
        self.never_admitted = word.never_admitted
        return word.message

    async def _position(
        self,
        job: Mapping[str, Any],
        workload_name: str,
        connection: ClusterConnection,
        job_subscription: Subscription,
    ) -> QueuePosition | None:
        """The Workload's place in its LocalQueue, from the loop's shared poller of that queue."""
        if self._positions is None:
            from airflow_provider_disttrain.hooks.queue_positions import follow_position
            from airflow_provider_disttrain.hooks.watch_registry import registry

            # The Workload watch just opened holds the cluster's shared client: the poller borrows it.
            cluster = registry().clusters.get(connection.identity)
            if cluster is None:
                return None
            self._positions_context = follow_position(
                connection.identity,
                cluster,
                job["metadata"]["namespace"],
                str(queue_name(job)),
                workload_name,
                job_subscription.changed,
            )
            self._positions = await self._positions_context.__aenter__()
        return self._positions.position(workload_name)

    def _estimate(self, job: Mapping[str, Any], position: QueuePosition | None) -> WaitEstimate | None:
        """When the job may start, from the admissions the shared Workload watch saw (no request of its own);
        None while its place is not asked for (the visibility API refused)."""
        watch = self._subscription.watch if self._subscription is not None else None
        if watch is None or watch.admissions is None or self._positions is None or self._positions.unavailable:
            return None
        return watch.admissions.estimate(str(queue_name(job)), position, watch.clock.wall())

    async def stop(self) -> None:
        context, self._context, self._subscription = self._context, None, None
        positions, self._positions_context, self._positions = self._positions_context, None, None
        if positions is not None:
            await positions.__aexit__(None, None, None)
        if context is not None:
            await context.__aexit__(None, None, None)
