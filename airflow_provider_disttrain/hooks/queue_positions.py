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

from airflow_provider_disttrain.hooks.api_errors import api_status, describe_error
from airflow_provider_disttrain.kueue.position import QueuePosition, parse_summary, pending_workloads_path
from airflow_provider_disttrain.kueue.waiting import POSITION_REFRESH_SECONDS, PositionBook
from airflow_provider_disttrain.utils import clock as clocks
from airflow_provider_disttrain.utils.clock import Clock

log = logging.getLogger(__name__)

Fetch = Callable[[], Awaitable[Mapping[str, Any]]]


@dataclass
class LocalQueuePositions:
    """The positions of one LocalQueue's pending Workloads, refreshed while anyone follows them. What an
    answer means is ``PositionBook``'s; this asks on the clock and wakes the followers whose job moved."""

    namespace: str
    local_queue: str
    fetch: Fetch
    clock: Clock
    refresh_seconds: float = POSITION_REFRESH_SECONDS
    on_idle: Callable[[LocalQueuePositions], None] | None = None
    requests: int = 0
    _book: PositionBook = field(init=False)
    _followers: dict[asyncio.Event, str] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        self._book = PositionBook(self.namespace, self.local_queue, self.refresh_seconds)

    @property
    def unavailable(self) -> bool:
        return self._book.unavailable

    @property
    def malformed(self) -> bool:
        """The last answer was malformed (said once until a good answer comes)."""
        return self._book.malformed

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
        return self._book.positions.get(workload_name)

    async def _run(self) -> None:
        while self._followers:
            self.requests += 1
            self._book.asking(self.clock.monotonic())
            try:
                summary = await self.fetch()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if (warning := self._book.failed(api_status(error), describe_error(error))) is not None:
                    log.warning("%s", warning)
                    self._task = None
                    return
                log.debug("Queue positions of %s/%s not read this time: %r", self.namespace, self.local_queue, error)
            else:
                moved, warning = self._book.answered(summary)
                if warning is not None:
                    log.warning("%s", warning)
                for changed, name in self._followers.items():
                    if name in moved:
                        changed.set()
            await self.clock.sleep(self.refresh_seconds)


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
