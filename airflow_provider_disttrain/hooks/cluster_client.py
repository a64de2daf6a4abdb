"""One asynchronous API client per cluster in a triggerer process, renewed when its credentials age.

Every trigger of one triggerer runs in one event loop; they all reach the same few clusters. Building
a client per trigger costs a kubeconfig load, an SSL context (the whole CA bundle, ~16 ms of blocked
loop) and a TLS connection each, so triggers lease the one client of their cluster instead.

Credentials expire (exec plugins for EKS/GKE/OIDC, projected service-account tokens), and a client
built once keeps the token it was built with. A client is therefore rebuilt - which re-runs the exec
plugin or re-reads the token file, through the cncf hook's own config loading - when the API server
answers 401 (``renew``) and when it is older than ``max_age``. A renewed client's predecessor is closed
once the last request leased on it has ended, so a rebuild never cuts another watch short.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

# Rebuilt at least this often: shorter than the 15-minute tokens that EKS and GKE plugins issue.
CLIENT_MAX_AGE_SECONDS = 600.0


def cluster_identity(connection: Mapping[str, Any]) -> str:
    """A stable key for "the same cluster, reached the same way" (connection id, context, config)."""
    text = json.dumps(connection, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Generation:
    """One built API client and the requests currently leased on it."""

    def __init__(self, number: int, api: Any, stack: contextlib.AsyncExitStack) -> None:
        self.number = number
        self.api = api
        self.stack = stack
        self.built_at = time.monotonic()
        self.leases = 0
        self.retired = False
        self.closed = False


class ClusterClient:
    """The shared API client of one cluster identity; lease it for the length of one request.

    :param connection: the keyword arguments of ``AsyncTrainingJobHook`` (connection id, context,
        shipped kubeconfig and extras) - what a trigger serialized.
    :param max_age: seconds after which the next lease rebuilds the client.
    """

    def __init__(self, connection: Mapping[str, Any], max_age: float = CLIENT_MAX_AGE_SECONDS) -> None:
        self.connection = dict(connection)
        self.max_age = max_age
        self._current: _Generation | None = None
        self._built = 0
        self._lock = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def generation(self) -> int:
        """How many clients have been built; a lease's number tells ``renew`` which one failed."""
        return self._current.number if self._current else 0

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[tuple[Any, int]]:
        """``(api client, generation)`` for one request; the client stays open until it ends."""
        async with self._lock:
            current = self._current
            if current is None or time.monotonic() - current.built_at >= self.max_age:
                current = await self._rebuild()
            current.leases += 1
        try:
            yield current.api, current.number
        finally:
            current.leases -= 1
            self._close_if_idle(current)

    async def renew(self, failed_generation: int) -> None:
        """Build a new client, unless one newer than ``failed_generation`` was built meanwhile."""
        async with self._lock:
            if self._current is None or self._current.number <= failed_generation:
                await self._rebuild()

    async def close(self) -> None:
        """Retire the current client (closed when its last lease ends) and wait for those closing."""
        async with self._lock:
            current, self._current = self._current, None
        if current is not None:
            current.retired = True
            self._close_if_idle(current)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def _rebuild(self) -> _Generation:
        # Imported here: the trigger module must stay importable without kubernetes_asyncio loaded.
        from airflow_provider_disttrain.hooks.async_training_job import AsyncTrainingJobHook

        stack = contextlib.AsyncExitStack()
        try:
            api = await stack.enter_async_context(AsyncTrainingJobHook(**self.connection).get_conn())
        except BaseException:
            await stack.aclose()
            raise
        self._built += 1
        previous, self._current = self._current, _Generation(self._built, api, stack)
        if previous is not None:
            previous.retired = True
            self._close_if_idle(previous)
        return self._current

    def _close_if_idle(self, generation: _Generation) -> None:
        if generation.retired and generation.leases == 0 and not generation.closed:
            generation.closed = True
            task = asyncio.get_running_loop().create_task(generation.stack.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
