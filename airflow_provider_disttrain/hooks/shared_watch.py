"""One LIST + WATCH per (cluster, kind, namespace, selector), shared by every trigger in a triggerer.

Hundreds of deferred training tasks wait in one triggerer process. Rather than a client, a TLS
connection and a watch each, the triggers of one event loop subscribe to a ``SharedWatch``: it lists
the jobs once, watches them with one long request, keeps the latest object of each job, and wakes the
subscribers of a job when it changes. The provider labels every job it creates, so the watch is
restricted to those jobs by a label selector and unrelated jobs in a busy namespace cost nothing. Jobs
without the label (a sensor on a name) share one unselected watch of their kind and namespace: a watch
per name would take one pooled connection each and could starve every other watch of the cluster.

Watching follows the API server's rules (the "Efficient detection of changes" section of the API
concepts): resume from the last event's or BOOKMARK's resourceVersion; on 410 Gone relist and watch
from the list's resourceVersion; back off on repeated failures (capped by the subscribers'
``poll_interval``, so a watch that keeps breaking degrades into polling with a LIST); give each watch
request a client-side timeout longer than its server-side ``timeoutSeconds``, and restart a watch
that has been silent (no event, no BOOKMARK) for about twice the server's bookmark cadence. What each
error leads to is ``hooks.faults``' table.

Why not ``kubernetes_asyncio.watch.Watch``: it builds a new ``ApiClient`` (and SSL context) for every
stream, deserialises each event a second time, and retries 410 itself from a stale version; this loop
needs one shared client, resumption from bookmarks and a relist with backoff instead. Reading the
stream's JSON lines is all it takes.

What the watch keeps, and how it follows objects keyed by a label (Kueue's Workloads), is
``hooks.watch_cache``; its values are ``hooks.watch_values``. Waiters take a ``Subscription`` with
``hooks.watch_registry.subscribe``. The watch starts with its first subscriber and stops
``LINGER_SECONDS`` after its last one leaves; its cluster's client closes with the cluster's last watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.hooks.api_errors import describe_error
from airflow_provider_disttrain.hooks.async_training_job import raise_for_status
from airflow_provider_disttrain.hooks.cluster_client import ClusterClient
from airflow_provider_disttrain.hooks.faults import Action, Fault, classify, error_class
from airflow_provider_disttrain.hooks.watch_cache import WatchCache
from airflow_provider_disttrain.hooks.watch_values import CachedJob, WatchKey, WatchProblem, trimmed
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.kube.resources import ApiResource
from airflow_provider_disttrain.utils import clock as clocks
from airflow_provider_disttrain.utils import telemetry
from airflow_provider_disttrain.utils.clock import Clock
from airflow_provider_disttrain.utils.timeouts import next_line, within

__all__ = ["CachedJob", "SharedWatch", "Subscription", "WatchKey", "WatchProblem", "trimmed"]

LINGER_SECONDS = 5.0
"""How long a watch outlives its last subscriber: a trigger moved or retried soon finds it warm."""
CLIENT_TIMEOUT_MARGIN_SECONDS = 30.0
"""Client-side total timeout of a watch request beyond its server-side ``timeoutSeconds``."""
SILENCE_LIMIT_SECONDS = 130.0
"""A watch that received nothing (no event, no BOOKMARK) for this long is restarted. The API server
sends a BOOKMARK about once a minute on a quiet watch that asked for them (``allowWatchBookmarks``),
so twice that without a line means the connection is dead (half-open, or a proxy holding it) - found
in about two minutes instead of at the client's total timeout (``watch_timeout`` + 30 s)."""
HEALTHY_WATCH_SECONDS = 30.0
"""A watch request that lived this long resets the failure count (and so the backoff)."""
FAILURES_BEFORE_RELIST = 3
"""Broken watch requests in a row after which each retry relists first (the polling fallback)."""
MIN_BACKOFF_SECONDS = 0.5
LIST_PAGE_SIZE = 500
"""Objects per page of a LIST (``limit``); kube-apiserver answers a page from its watch cache."""
MIN_BACKOFF_CAP_SECONDS = 1.0
"""The floor of the backoff's cap: at most about two requests a second per watch during an outage."""
ARRIVALS_QUIET_SECONDS = 0.02
"""A new watch's first LIST waits until no subscriber arrived for this long (``_await_arrivals``)."""
ARRIVALS_MAX_SECONDS = 2.0
"""... but no longer than this after its first subscriber."""

log = logging.getLogger(__name__)


class Subscription:
    """One trigger's view of one job through a shared watch."""

    def __init__(
        self,
        watch: SharedWatch,
        name: str,
        watch_timeout: float,
        poll_interval: float,
        changed: asyncio.Event | None = None,
        ordinal: int = 0,
    ) -> None:
        self.watch = watch
        self.name = name
        self.ordinal = ordinal
        """How many subscriptions the watch had taken before this one (see ``listed``)."""
        self.watch_timeout = watch_timeout
        self.poll_interval = poll_interval
        # Shared with another subscription when one waiter follows two objects (a job and its Workload).
        self.changed = self._changed = changed or asyncio.Event()

    @property
    def synced(self) -> bool:
        """The watch has listed its jobs at least once, so ``entry`` is the server's word."""
        return self.watch.synced

    @property
    def listed(self) -> bool:
        """The watch's view comes from a LIST sent after this subscription was made: a job missing from
        it did not match the watch's selectors (or did not exist) while this waiter already waited for it.
        A LIST without ``resourceVersion`` is a consistent read, so a job created before it is in it."""
        return self.ordinal < self.watch.listed_through

    @property
    def entry(self) -> CachedJob | None:
        return self.watch.cached(self.name)

    @property
    def problem(self) -> WatchProblem | None:
        return self.watch.problem

    def notify(self) -> None:
        self._changed.set()

    async def wait(self, timeout: float | None) -> None:
        """Until the job or the watch's health changes, or ``timeout`` seconds pass."""
        with contextlib.suppress(asyncio.TimeoutError):
            async with within(timeout):
                await self._changed.wait()
        self._changed.clear()

    async def read(self) -> dict[str, Any] | None:
        """GET the job by name (None when it does not exist), through the watch's shared client."""
        return await self.watch.read(self.name)

    async def warning_events(self) -> list[dict[str, Any]]:
        """The Warning events about the job (``controller_refusal``), through the watch's shared client."""
        return await self.watch.warning_events(self.name)

    async def read_view(self) -> dict[str, Any] | None:
        """``read()``, trimmed as the watch caches jobs: what a waiter keeps of a job it looked up costs
        what the cache's copy does, not its whole spec (a sensor holds it for the whole wait)."""
        job = await self.read()
        return None if job is None else trimmed(job)


class SharedWatch(WatchCache):
    """LIST + WATCH of one kind in one namespace, cached, with subscribers per job name."""

    def __init__(
        self,
        key: WatchKey,
        kind: JobKind | ApiResource,
        cluster: ClusterClient,
        on_idle: Any,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(key)
        self.clock = clock or clocks.current()
        self.kind = kind
        self.resource = kind.resource if isinstance(kind, JobKind) else kind
        self.cluster = cluster
        self._on_idle = on_idle
        self._resource_version: str | None = None
        self.synced = False
        self.ever_synced = False
        self._arrivals = 0  # subscriptions taken so far (each one's ``ordinal``)
        self.listed_through = 0
        """The subscriptions with an ordinal below this one came before the current view's LIST was sent."""
        self.problem: WatchProblem | None = None
        self._task: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._unauthorized = 0  # 401 answers since the last accepted request

    # Subscribers ---------------------------------------------------------------------------------

    def subscribe(
        self, name: str, watch_timeout: float, poll_interval: float, changed: asyncio.Event | None = None
    ) -> Subscription:
        subscription = Subscription(self, name, watch_timeout, poll_interval, changed, ordinal=self._arrivals)
        self._arrivals += 1
        self._subscribers.setdefault(name, set()).add(subscription)
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"shared-watch {self.key}")
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        subscribers = self._subscribers.get(subscription.name, set())
        subscribers.discard(subscription)
        if not subscribers:
            # Nobody waits for it any more: the cache holds only jobs some trigger waits for, not the
            # namespace's history of finished jobs.
            self._subscribers.pop(subscription.name, None)
            self._jobs.pop(subscription.name, None)
            self._members.pop(subscription.name, None)
        if not self._subscribers and self._idle_timer is None:
            self._idle_timer = asyncio.get_running_loop().call_later(LINGER_SECONDS, self._stop_if_idle)

    def _stop_if_idle(self) -> None:
        self._idle_timer = None
        if self._subscribers:
            return
        if self._task is not None:
            self._task.cancel()
        self._on_idle(self)

    async def stop(self) -> None:
        """Cancel the watch loop and wait for it to end (its request's response is released)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # The loop ------------------------------------------------------------------------------------

    def _watch_timeout(self) -> float:
        timeouts = [s.watch_timeout for subs in self._subscribers.values() for s in subs]
        return min(timeouts) if timeouts else 300.0

    def _backoff_cap(self) -> float:
        """The longest wait between retries: the subscribers' shortest ``poll_interval``, but never
        below ``MIN_BACKOFF_CAP_SECONDS``, so one trigger's tiny interval cannot make every waiter of
        the watch hammer a server in trouble."""
        intervals = [s.poll_interval for subs in self._subscribers.values() for s in subs]
        return max(min(intervals) if intervals else 10.0, MIN_BACKOFF_CAP_SECONDS)

    async def _run(self) -> None:
        failures = 0  # failed requests in a row, for the backoff
        broken_watches = 0  # watch requests that broke in a row, for the relist fallback
        must_list = True
        await self._await_arrivals()
        while True:
            generation = self.cluster.generation
            started = self.clock.monotonic()
            try:
                if must_list:
                    await self._list()
                    must_list = False
                await self._watch_once()
                failures = broken_watches = 0  # ended by the server's timeout: all is well
                continue
            except asyncio.CancelledError:
                raise
            except Exception as error:
                fault = classify(error)
                self._count(error)
                if self.clock.monotonic() - started >= HEALTHY_WATCH_SECONDS:
                    failures = broken_watches = 0
                failures += 1
                if fault.action is Action.RELIST:
                    # Our resourceVersion is older than the server keeps: relist and watch from there.
                    must_list = True
                    if failures == 1:
                        continue
                elif fault.action is Action.RENEW:
                    # Expired or rotated credentials: a new client re-runs the exec plugin or re-reads
                    # the token file. Only a 401 that a freshly built client gets is reported; a plugin
                    # that fails meanwhile is the problem instead (an outage: see _renew).
                    self._unauthorized += 1
                    renewed = await self._renew(generation)
                    if renewed and self._unauthorized == 1:
                        continue
                    if renewed:
                        self._set_problem(error, fault)
                elif fault.action in (Action.RETRY, Action.DENIED):
                    # DENIED too: a restarted API server refuses until its RBAC caches have synced;
                    # the subscribers decide how long that may last.
                    broken_watches += 1
                    must_list = must_list or broken_watches >= FAILURES_BEFORE_RELIST
                    self._set_problem(error, fault)
                else:
                    self._set_problem(error, fault)
                delay = min(self._backoff_cap(), MIN_BACKOFF_SECONDS * 2 ** min(failures, 8))
                log.debug("Watch %s failed (%r); retrying in %.1fs", self.key, error, delay)
                await self.clock.sleep(delay * random.uniform(0.5, 1.0))

    async def _await_arrivals(self) -> None:
        """Until subscribers stop arriving, before the watch's first LIST only (a relist serves the
        subscribers it has). A triggerer starts its triggers one or a few per loop turn (Airflow's
        ``create_triggers``; ``loop_pacing``): a first LIST sent at the first one would keep only the
        jobs of the triggers subscribed when each page was read, and each later trigger would then read
        its job with a GET (hundreds at 1,000 triggers). A short wait makes it one LIST."""
        deadline = self.clock.monotonic() + ARRIVALS_MAX_SECONDS
        seen = -1
        while seen != self._arrivals and self.clock.monotonic() < deadline:
            seen = self._arrivals
            await self.clock.sleep(ARRIVALS_QUIET_SECONDS)

    def _count(self, error: BaseException) -> None:
        """The telemetry of a broken request: an API error, and a restart of this watch, by error class."""
        broken = error_class(error)
        tags = {"kind": self.key.kind, "namespace": self.key.namespace}
        telemetry.api_error(broken, **tags)
        telemetry.watch_restart(broken, **tags)

    async def _renew(self, generation: int) -> bool:
        log.info("Watch %s: the API server answered 401; renewing the credentials", self.key)
        try:
            await self.cluster.renew(generation)
        except Exception as error:  # e.g. the exec plugin failed (or hung): that is the problem to report
            self._set_problem(error, classify(error))
            # The next 401 comes from the same old client again: no verdict on fresh credentials yet.
            self._unauthorized = 0
            return False
        return True

    def _accepted(self) -> None:
        """The API server answered a request: whatever was wrong with the watch is over."""
        self._unauthorized = 0
        self._set_problem(None)

    def _set_problem(self, error: BaseException | None, fault: Fault | None = None) -> None:
        if error is None or fault is None:
            if self.problem is not None:
                log.info("Watch %s works again after %.0fs", self.key, self.clock.monotonic() - self.problem.since)
                self.problem = None
                self._notify()
            return
        if self.problem is None:  # once per episode, not per retry
            log.warning("Watch %s: %s; retrying with backoff", self.key, describe_error(error))
        problem = WatchProblem(error, self.clock.monotonic(), fault.status, fault.action is Action.FATAL)
        previous = self.problem
        if previous is not None and previous.denied == problem.denied:
            # The same kind of trouble goes on (an outage, or a refusal): it counts from its start.
            problem = WatchProblem(error, previous.since, problem.status, problem.fatal)
        self.problem = problem
        if previous is None or (previous.since, previous.fatal) != (problem.since, problem.fatal):
            # Subscribers wake when trouble starts or changes kind, not on every retry of an outage:
            # they judge it by its start, which a retry does not move.
            self._notify()

    def _selectors(self) -> dict[str, Any]:
        selectors = {"label_selector": self.key.label_selector, "field_selector": self.key.field_selector}
        return {key: value for key, value in selectors.items() if value}

    async def _list(self) -> None:
        """LIST the watch's objects page by page (``LIST_PAGE_SIZE``), keeping those someone waits for.

        Pages, as client-go's pager does: a namespace's history of finished jobs can be tens of
        thousands; parsing one page blocks the event loop for milliseconds, where one answer of
        20,000 jobs blocked it for seconds. All pages are of one snapshot (the continue token pins
        its resourceVersion); an expired token is a 410, relisted from the start like any other.
        """
        from kubernetes_asyncio import client as async_client

        items: list[dict[str, Any]] = []
        token: str | None = None
        sent_after = self._arrivals  # the subscriptions this LIST's answer can speak for
        while True:
            async with self.cluster.lease() as (api, _):
                response = await async_client.CustomObjectsApi(api).list_namespaced_custom_object(
                    **self.resource.namespaced_path(self.key.namespace),
                    _preload_content=False,
                    limit=LIST_PAGE_SIZE,
                    _continue=token,  # type: ignore[arg-type]  # None: the first page (the client sends no parameter)
                    **self._selectors(),
                )
                try:
                    await raise_for_status(response)
                    page: dict[str, Any] = json.loads(await response.read())
                finally:
                    response.release()
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            items.extend(self._compacted(page))
            if not token:
                break
        self._accepted()
        changed = self._keep_listed(items)
        self._resource_version = metadata.get("resourceVersion")
        self.listed_through = sent_after
        first_sync = not self.synced
        self.synced = self.ever_synced = True
        if first_sync:
            self._notify()
        else:
            for name in changed:
                self._notify(name)

    async def _watch_once(self) -> None:
        """One watch request, applying its events, until the server ends it at ``timeoutSeconds``."""
        from kubernetes_asyncio import client as async_client

        timeout = self._watch_timeout()
        async with self.cluster.lease() as (api, _):
            options: dict[str, Any] = {
                "watch": True,
                "allow_watch_bookmarks": True,
                "timeout_seconds": max(1, int(timeout)),
                "_preload_content": False,
                "_request_timeout": timeout + CLIENT_TIMEOUT_MARGIN_SECONDS,
                **self._selectors(),
            }
            if self._resource_version:
                options["resource_version"] = self._resource_version
            response = await async_client.CustomObjectsApi(api).list_namespaced_custom_object(
                **self.resource.namespaced_path(self.key.namespace), **options
            )
            try:
                await raise_for_status(response)
                # Healthy once the server speaks (an event, a bookmark, or the end at timeoutSeconds):
                # a proxy that accepts the request and then stays silent is not.
                while line := await next_line(response.content, SILENCE_LIMIT_SECONDS):
                    if line.strip():
                        self._apply(json.loads(line))
                        if self.problem is not None or self._unauthorized:
                            self._accepted()
            finally:
                response.release()
        self._accepted()

    def _apply(self, event: Mapping[str, Any]) -> None:
        from kubernetes_asyncio.client.exceptions import ApiException

        event_type = event.get("type")
        obj = event.get("object") or {}
        if event_type == "ERROR":
            # An in-stream Status: 410 Gone when our resourceVersion is too old, or a server error.
            raise ApiException(status=obj.get("code") or 500, reason=f"{obj.get('reason')}: {obj.get('message')}")
        metadata = obj.get("metadata") or {}
        if metadata.get("resourceVersion"):
            self._resource_version = metadata["resourceVersion"]
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return  # BOOKMARK: only its resourceVersion matters
        self._store(obj, deleted=event_type == "DELETED")

    async def read(self, name: str) -> dict[str, Any] | None:
        from airflow_provider_disttrain.hooks.async_training_job import AsyncJobClient

        # Only job watches are read by name (a Workload appears in its watch once Kueue made it).
        assert isinstance(self.kind, JobKind) and not self.key.index_label
        async with self.cluster.short_request() as (api, _):
            return await AsyncJobClient(api).get_job(self.kind, name, self.key.namespace)

    async def warning_events(self, name: str) -> list[dict[str, Any]]:
        from airflow_provider_disttrain.hooks.async_training_job import AsyncJobClient

        async with self.cluster.short_request() as (api, _):
            return await AsyncJobClient(api).list_warning_events(self.key.namespace, name)
