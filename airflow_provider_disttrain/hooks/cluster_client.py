"""One asynchronous API client per cluster in a triggerer process, renewed when its credentials age.

Every trigger of one triggerer runs in one event loop; they all reach the same few clusters. Building
a client per trigger costs a kubeconfig load, an SSL context (the whole CA bundle, ~16 ms of blocked
loop) and a TLS connection each, so triggers lease the one client of their cluster instead.

Credentials expire (exec plugins for EKS/GKE/OIDC, projected service-account tokens), and a client
built once keeps the token it was built with. A client is therefore rebuilt - which re-runs the exec
plugin or re-reads the token file, through the cncf hook's own config loading - when the API server
answers 401 (``renew``) and when it is older than ``max_age``. A renewed client's predecessor is closed
once the last request leased on it has ended, so a rebuild never cuts another watch short.

Building runs an exec plugin, which can fail (a throttled STS call) or hang. So a build is one shared
background task, bounded by ``build_timeout``, that no request waits for while the current client still
works; the plugin runs as this provider's own child with the same bound (``exec_plugin``), and a run
given up on is killed by its own PID, never another process of the triggerer. A periodic rebuild that
fails keeps the current client and tries again ``BUILD_RETRY_SECONDS`` later, logging why. Only a
request that has no working client (the first one, or after a 401) waits for the build, and gets
``CredentialsUnavailable`` - a ``ConnectionError``, so transient - if the plugin fails or does not
answer in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from airflow_provider_disttrain.hooks.api_errors import is_plugin_failure
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.utils.clock import SYSTEM, Clock
from airflow_provider_disttrain.utils.timeouts import within

# Rebuilt at least this often: shorter than the 15-minute tokens that EKS and GKE plugins issue.
CLIENT_MAX_AGE_SECONDS = 600.0
# An exec plugin that has not answered by then is given up on (aws and gcloud answer in seconds).
BUILD_TIMEOUT_SECONDS = 60.0
# After a periodic rebuild failed, the current client is used this long before the next try.
BUILD_RETRY_SECONDS = 30.0
MAX_SHORT_REQUESTS = 8
"""One-off requests (a GET of one job, a position patch) in flight at once on one cluster's client.
Each request in flight holds one of the client's 100 pooled connections, and every connection opened
keeps its TLS state and buffers until it idles out, its memory in the process for good. Without a
bound, 200 sensors deferred at once read their jobs in one burst and opened the whole pool (the
scale benchmark's unlabelled path: 100 connections, ~190 KB per waiting job against ~37 KB on the
labelled path). Eight in flight answer such a burst at the API server's pace all the same."""
MAX_LOG_STREAMS = 64
"""Followed logs open at once on one cluster's client. Each holds a pooled connection for as long as
it runs; the rest of the pool stays free for the watches and the short requests (the benchmark saw
patches time out when 100 streams held the whole pool). A follower beyond this waits for a slot."""

log = logging.getLogger(__name__)


class CredentialsUnavailable(ConnectionError):
    """The cluster's credentials cannot be had right now: the kubeconfig's exec plugin failed or hung.

    A ``ConnectionError``: like an outage, it may heal (the next run of the plugin may work), so the
    wait retries within its ``api_failure_tolerance``. ``cause`` is the plugin's error (None: timeout).
    """

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class ClusterClientClosed(RuntimeError):
    """A lease asked of a ``ClusterClient`` its registry has closed."""


class _Generation:
    """One built API client and the requests currently leased on it."""

    def __init__(self, number: int, api: Any, stack: contextlib.AsyncExitStack, built_at: float) -> None:
        self.number = number
        self.api = api
        self.stack = stack
        self.built_at = built_at
        self.next_build_at = built_at  # set forward by ``ClusterClient`` (max age, retries)
        self.unauthorized = False  # the API server refused its credentials: not to be leased again
        self.leases = 0
        self.retired = False
        self.closed = False


class ClusterClient:
    """The shared API client of one cluster connection; lease it for the length of one request.

    :param connection: the cluster and how to reach it (what a trigger was given).
    :param max_age: seconds after which the client is rebuilt in the background
        (default ``CLIENT_MAX_AGE_SECONDS``).
    :param build_timeout: seconds a build (kubeconfig load, exec plugin) may take
        (default ``BUILD_TIMEOUT_SECONDS``).
    :param clock: the clock whose monotonic seconds time the client's age (the watch registry's).
    """

    def __init__(
        self,
        connection: ClusterConnection,
        max_age: float | None = None,
        build_timeout: float | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.connection = connection
        self.max_age = CLIENT_MAX_AGE_SECONDS if max_age is None else max_age
        self.build_timeout = BUILD_TIMEOUT_SECONDS if build_timeout is None else build_timeout
        self._clock = clock
        self._current: _Generation | None = None
        self.closed = False
        self._built = 0
        self._building: asyncio.Task[_Generation] | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._short_slots = asyncio.Semaphore(MAX_SHORT_REQUESTS)
        self._stream_slots = asyncio.Semaphore(MAX_LOG_STREAMS)

    @property
    def generation(self) -> int:
        """How many clients have been built; a lease's number tells ``renew`` which one failed."""
        return self._current.number if self._current else 0

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[tuple[Any, int]]:
        """``(api client, generation)`` for one request; the client stays open until it ends.

        :raises ClusterClientClosed: after ``close()``: a straggler must not build a client nobody closes.
        """
        if self.closed:
            raise ClusterClientClosed("the cluster's shared client was closed (its last watch ended)")
        current = self._current
        if current is None or current.unauthorized:
            current = await self._wait_for_build()
        elif self._clock.monotonic() >= current.next_build_at:
            self._start_build()  # in the background: this request goes on with the current client
        current.leases += 1
        try:
            yield current.api, current.number
        finally:
            current.leases -= 1
            self._close_if_idle(current)

    @contextlib.asynccontextmanager
    async def short_request(self) -> AsyncIterator[tuple[Any, int]]:
        """A lease for one short request, once one of ``MAX_SHORT_REQUESTS`` slots is free."""
        async with self._short_slots, self.lease() as leased:
            yield leased

    @contextlib.asynccontextmanager
    async def log_stream(self) -> AsyncIterator[tuple[Any, int]]:
        """A lease for one followed log, once one of ``MAX_LOG_STREAMS`` slots is free."""
        async with self._stream_slots, self.lease() as leased:
            yield leased

    async def renew(self, failed_generation: int) -> None:
        """Build a new client, unless one newer than ``failed_generation`` was built meanwhile."""
        current = self._current
        if current is not None and current.number > failed_generation:
            return
        if current is not None:
            current.unauthorized = True
        await self._wait_for_build()

    async def close(self) -> None:
        """Retire the current client (closed when its last lease ends) and wait for those closing; no
        lease is given after this."""
        self.closed = True
        building, self._building = self._building, None
        if building is not None and not building.done():
            building.cancel()
            await asyncio.wait({building})
        current, self._current = self._current, None
        if current is not None:
            current.retired = True
            self._close_if_idle(current)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def _wait_for_build(self) -> _Generation:
        # Shielded: a request that is cancelled (its trigger ended) leaves the shared build running.
        return await asyncio.shield(self._start_build())

    def _start_build(self) -> asyncio.Task[_Generation]:
        if self._building is None or self._building.done():
            self._building = asyncio.get_running_loop().create_task(self._build())
            self._building.add_done_callback(self._after_build)
        return self._building

    def _after_build(self, task: asyncio.Task[_Generation]) -> None:
        """A failed build leaves the current client (if it still works) in use until the next try."""
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        current = self._current
        if current is not None and not current.unauthorized:
            current.next_build_at = self._clock.monotonic() + BUILD_RETRY_SECONDS
            log.warning(
                "Renewing the API client of %s failed (%s); the current one is used %.0fs longer",
                self._title,
                error,
                BUILD_RETRY_SECONDS,
            )
        else:
            log.warning("Building the API client of %s failed: %s", self._title, error)

    @property
    def _title(self) -> str:
        return f"connection {self.connection.conn_id or '(shipped kubeconfig)'}" + (
            f" context {self.connection.cluster_context}" if self.connection.cluster_context else ""
        )

    async def _build(self) -> _Generation:
        # Imported here, not at the top: the operators import this module (through ``live_logs``) and
        # must not load kubernetes_asyncio, which a DAG file never needs.
        from airflow_provider_disttrain.hooks.async_training_job import AsyncTrainingJobHook
        from airflow_provider_disttrain.hooks.exec_plugin import owned_exec_plugins

        stack = contextlib.AsyncExitStack()
        try:
            # A plugin run that times out, or is cancelled with the build (the cluster's last watch
            # ended), is killed by its own PID: kubernetes_asyncio's provider would leave it running.
            with owned_exec_plugins(self.build_timeout):
                async with within(self.build_timeout):
                    api = await stack.enter_async_context(
                        AsyncTrainingJobHook.for_connection(self.connection).get_conn()
                    )
        except (TimeoutError, asyncio.TimeoutError):
            await stack.aclose()
            raise CredentialsUnavailable(
                f"the credentials of {self._title} did not come within {self.build_timeout:.0f}s "
                "(the kubeconfig's exec plugin hangs?)"
            ) from None
        except BaseException as error:
            await stack.aclose()
            if is_plugin_failure(error):
                raise CredentialsUnavailable(f"the exec plugin of {self._title} failed: {error}", error) from error
            raise
        self._built += 1
        generation = _Generation(self._built, api, stack, self._clock.monotonic())
        generation.next_build_at = generation.built_at + self.max_age
        previous, self._current = self._current, generation
        if previous is not None:
            previous.retired = True
            self._close_if_idle(previous)
        return generation

    def _close_if_idle(self, generation: _Generation) -> None:
        if generation.retired and generation.leases == 0 and not generation.closed:
            generation.closed = True
            task = asyncio.get_running_loop().create_task(generation.stack.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
