"""The shared watches (``hooks.shared_watch``) and cluster clients of one event loop (one triggerer),
and ``subscribe``: how a trigger follows one object through them."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator

from airflow_provider_disttrain.hooks.cluster_client import ClusterClient
from airflow_provider_disttrain.hooks.shared_watch import SharedWatch, Subscription
from airflow_provider_disttrain.hooks.watch_values import WatchKey
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kube.resources import ApiResource
from airflow_provider_disttrain.utils import clock as clocks
from airflow_provider_disttrain.utils.clock import Clock


class WatchRegistry:
    """The shared watches and cluster clients of one event loop (one triggerer)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or clocks.current()
        self.clusters: dict[str, ClusterClient] = {}
        self.watches: dict[WatchKey, SharedWatch] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def watch_for(
        self,
        connection: ClusterConnection,
        kind: JobKind | ApiResource,
        namespace: str,
        label_selector: str,
        field_selector: str,
        index_label: str = "",
    ) -> SharedWatch:
        cluster_key = connection.identity
        key = WatchKey(cluster_key, kind.kind, namespace, label_selector, field_selector, index_label)
        watch = self.watches.get(key)
        if watch is None:
            cluster = self.clusters.get(cluster_key)
            if cluster is None:
                cluster = self.clusters[cluster_key] = ClusterClient(connection, clock=self.clock)
            watch = self.watches[key] = SharedWatch(key, kind, cluster, self._forget, self.clock)
        return watch

    def _forget(self, watch: SharedWatch) -> None:
        """A watch went idle: drop it, and close its cluster's client if no other watch uses it."""
        if self.watches.get(watch.key) is watch:
            del self.watches[watch.key]
        cluster_in_use = any(w.cluster is watch.cluster for w in self.watches.values())
        if not cluster_in_use:
            self.clusters.pop(watch.key.cluster, None)
        task = asyncio.get_running_loop().create_task(self._close(watch, None if cluster_in_use else watch.cluster))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close(watch: SharedWatch, cluster: ClusterClient | None) -> None:
        await watch.stop()
        if cluster is not None:
            await cluster.close()


_registries: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WatchRegistry] = weakref.WeakKeyDictionary()


def registry() -> WatchRegistry:
    """The registry of the running event loop (the triggerer has one loop for all its triggers), on
    that loop's clock."""
    loop = asyncio.get_running_loop()
    if loop not in _registries:
        _registries[loop] = WatchRegistry(clocks.current())
    return _registries[loop]


@contextlib.asynccontextmanager
async def subscribe(
    connection: ClusterConnection,
    kind: JobKind | ApiResource,
    namespace: str,
    name: str,
    *,
    label_selector: str = "",
    field_selector: str = "",
    watch_timeout: float = 300.0,
    poll_interval: float = 10.0,
    index_label: str = "",
    changed: asyncio.Event | None = None,
) -> AsyncIterator[Subscription]:
    """Follow job ``name`` through the loop's shared watch of (cluster, kind, namespace, selectors).

    With ``index_label``, ``name`` is that label's value (the watch must select on the label); with
    ``changed``, the subscription sets that event (another subscription's ``changed``) on each change.
    """
    watch = registry().watch_for(connection, kind, namespace, label_selector, field_selector, index_label)
    subscription = watch.subscribe(name, watch_timeout, poll_interval, changed)
    try:
        yield subscription
    finally:
        watch.unsubscribe(subscription)
