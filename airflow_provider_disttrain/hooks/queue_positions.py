"""Kueue queue positions for the triggerer: one request per LocalQueue per interval, for all its waiters.

Each deferred job Kueue holds wants its place in its LocalQueue (``kueue_position``). One visibility
request answers for every job of that LocalQueue, so the triggers of one event loop share a
``LocalQueuePositions`` per (cluster, namespace, LocalQueue): it asks every ``refresh_seconds`` while
some trigger follows it, wakes the triggers whose job moved, and stops when the last one leaves.
With 1,000 jobs waiting in 10 LocalQueues that is 10 requests per interval, not 1,000.

When the API cannot answer for good (403: the Role lacks ``get`` on ``localqueues/pendingworkloads``;
404/503: Kueue's visibility API is not served), it says so once per LocalQueue and asks no more: the
waits go on with Kueue's reason alone. Any other error (an outage) keeps the last answer and is
retried at the next interval; the watch's fault model judges outages, not this courtesy. So is an
answer that is not a ``PendingWorkloadsSummary`` (``MalformedAnswer``): logged once until a good one
comes, skipped, asked again next interval; the poller never dies of what it is told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_disttrain.hooks.api_errors import api_status
from airflow_provider_disttrain.hooks.kueue import (
    POSITION_REFRESH_SECONDS,
    VISIBILITY_UNAVAILABLE,
    malformed_answer_warning,
    visibility_unavailable_warning,
)
from airflow_provider_disttrain.kueue.position import (
    MalformedAnswer,
    QueuePosition,
    parse_summary,
    pending_workloads_path,
    positions,
)
from airflow_provider_disttrain.utils import clock as clocks
from airflow_provider_disttrain.utils.clock import Clock

log = logging.getLogger(__name__)

Fetch = Callable[[], Awaitable[Mapping[str, Any]]]


@dataclass
class LocalQueuePositions:
    """The positions of one LocalQueue's pending Workloads, refreshed while anyone follows them."""

    namespace: str
    local_queue: str
    fetch: Fetch
    clock: Clock
    refresh_seconds: float = POSITION_REFRESH_SECONDS
    on_idle: Callable[[LocalQueuePositions], None] | None = None
    requests: int = 0
    unavailable: bool = False
    malformed: bool = False
    """The last answer was malformed (said once until a good answer comes)."""
    _positions: dict[str, QueuePosition] = field(default_factory=dict)
    _followers: dict[asyncio.Event, str] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def follow(self, workload_name: str, changed: asyncio.Event) -> None:
        """``changed`` is set when the position of ``workload_name`` changes (a trigger's wake-up event)."""
        self._followers[changed] = workload_name
        if self._task is None and not self.unavailable:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"kueue positions {self.namespace}/{self.local_queue}"
            )

    def unfollow(self, changed: asyncio.Event) -> None:
        self._followers.pop(changed, None)
        if not self._followers:
            if self._task is not None:
                self._task.cancel()
                self._task = None
            if self.on_idle is not None:
                self.on_idle(self)

    def position(self, workload_name: str) -> QueuePosition | None:
        return self._positions.get(workload_name)

    async def _run(self) -> None:
        while self._followers:
            self.requests += 1
            try:
                fresh = positions(self.local_queue, await self.fetch())
            except asyncio.CancelledError:
                raise
            except MalformedAnswer as error:
                if not self.malformed:
                    log.warning(
                        "%s", malformed_answer_warning(self.namespace, self.local_queue, error, self.refresh_seconds)
                    )
                self.malformed = True
            except Exception as error:
                if api_status(error) in VISIBILITY_UNAVAILABLE:
                    self.unavailable = True
                    log.warning("%s", visibility_unavailable_warning(self.namespace, self.local_queue, error))
                    self._task = None
                    return
                log.debug("Queue positions of %s/%s not read this time: %r", self.namespace, self.local_queue, error)
            else:
                self.malformed = False
                self._update(fresh)
            await self.clock.sleep(self.refresh_seconds)

    def _update(self, fresh: dict[str, QueuePosition]) -> None:
        old, self._positions = self._positions, fresh
        for changed, name in self._followers.items():
            if old.get(name) != fresh.get(name):
                changed.set()


class PositionRegistry:
    """The ``LocalQueuePositions`` of one event loop, by (cluster, namespace, LocalQueue)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.queues: dict[tuple[str, str, str], LocalQueuePositions] = {}

    def queue(self, cluster: str, namespace: str, local_queue: str, fetch: Fetch) -> LocalQueuePositions:
        key = (cluster, namespace, local_queue)
        found = self.queues.get(key)
        if found is None:
            found = self.queues[key] = LocalQueuePositions(
                namespace, local_queue, fetch, self.clock, on_idle=lambda q: self._forget(key, q)
            )
        return found

    def _forget(self, key: tuple[str, str, str], queue: LocalQueuePositions) -> None:
        # A queue the API refused stays, so that a trigger coming later does not ask (and warn) again.
        if self.queues.get(key) is queue and not queue.unavailable:
            del self.queues[key]


_registries: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PositionRegistry] = weakref.WeakKeyDictionary()


def registry() -> PositionRegistry:
    loop = asyncio.get_running_loop()
    if loop not in _registries:
        _registries[loop] = PositionRegistry(clocks.current())
    return _registries[loop]


def cluster_fetch(cluster: Any, namespace: str, local_queue: str) -> Fetch:
    """The GET of a LocalQueue's pending Workloads through a shared ``ClusterClient`` (one short request)."""

    async def fetch() -> Mapping[str, Any]:
        async with cluster.short_request() as (api, _):
            response = await api.call_api(
                pending_workloads_path(namespace, local_queue),
                "GET",
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,  # parsed here: client versions name the response type differently
            )
            try:
                return parse_summary(await response.read())
            finally:
                response.release()

    return fetch


@contextlib.asynccontextmanager
async def follow_position(
    cluster_key: str, cluster: Any, namespace: str, local_queue: str, workload_name: str, changed: asyncio.Event
) -> AsyncIterator[LocalQueuePositions]:
    """Follow one Workload's position in its LocalQueue through the loop's shared poller of that queue."""
    queue = registry().queue(cluster_key, namespace, local_queue, cluster_fetch(cluster, namespace, local_queue))
    queue.follow(workload_name, changed)
    try:
        yield queue
    finally:
        queue.unfollow(changed)
