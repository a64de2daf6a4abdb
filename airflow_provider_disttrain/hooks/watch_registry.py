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
        self.borrowers: dict[str, int] = {}
        """Per cluster, the readers holding its client without a watch there (``borrow``)."""
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
            watch = self.watches[key] = SharedWatch(key, kind, self._cluster(connection), self._forget, self.clock)
        return watch

    def _cluster(self, connection: ClusterConnection) -> ClusterClient:
        cluster = self.clusters.get(connection.identity)
        if cluster is None:
            cluster = self.clusters[connection.identity] = ClusterClient(connection, clock=self.clock)
        return cluster

    @contextlib.asynccontextmanager
    async def borrow(self, connection: ClusterConnection) -> AsyncIterator[ClusterClient]:
        """The shared client of ``connection``'s cluster, for a reader that has no watch there (a trigger
        reading its job's pods on a MultiKueue worker cluster): one client per cluster however many jobs
        run there, closed once its last watch and its last borrower are gone."""
        key = connection.identity
        cluster = self._cluster(connection)
        self.borrowers[key] = self.borrowers.get(key, 0) + 1
        try:
            yield cluster
        finally:
            self.borrowers[key] -= 1
            if not self.borrowers[key]:
                del self.borrowers[key]
                if not any(w.cluster is cluster for w in self.watches.values()):
                    self._close_later(None, cluster)

    def _forget(self, watch: SharedWatch) -> None:
        """A watch went idle: drop it, and close its cluster's client if no other watch uses it."""
        if self.watches.get(watch.key) is watch:
            del self.watches[watch.key]
        cluster_in_use = watch.key.cluster in self.borrowers or any(
            w.cluster is watch.cluster for w in self.watches.values()
        )
        self._close_later(watch, None if cluster_in_use else watch.cluster)

    def _close_later(self, watch: SharedWatch | None, cluster: ClusterClient | None) -> None:
        """Stop ``watch`` and close ``cluster`` (its client, dropped from ``clusters``) in a task of their own."""
        if cluster is not None and self.clusters.get(cluster.connection.identity) is cluster:
            del self.clusters[cluster.connection.identity]
        task = asyncio.get_running_loop().create_task(self._close(watch, cluster))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close(watch: SharedWatch | None, cluster: ClusterClient | None) -> None:
        if watch is not None:
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
