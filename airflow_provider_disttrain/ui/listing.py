"""A short-lived cache of job LISTs shared by everyone looking at the UI in one API-server process.

However many people have the tab or the page open, the cluster sees at most one LIST per (namespace,
kind) per ``ttl`` seconds from a process: the first request after the entry expires makes it, requests
that arrive meanwhile wait for that one (single flight) instead of making their own. Each API-server
worker process keeps its own cache, so N workers make at most N LISTs per ``ttl``.

No clock of its own (``clock`` is injected) and no client: ``fetch`` is the one call that reads the
cluster, so the cache is tested without either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_TTL_SECONDS = 5.0

Fetch = Callable[[str, str], list[dict[str, Any]]]
"""``fetch(namespace, key)``: what ``key`` names in ``namespace`` (the provider's jobs of a kind; one job's pods)."""


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    fetched_at: float | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    error: Exception | None = None


class JobListCache:
    """Jobs per (namespace, kind), re-read at most once per ``ttl`` seconds."""

    def __init__(self, fetch: Fetch, *, ttl: float = DEFAULT_TTL_SECONDS, clock: Callable[[], float] = time.monotonic):
        if ttl <= 0:
            raise ValueError(f"ttl must be > 0 seconds, got {ttl!r}")
        self._fetch = fetch
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._entries_lock = threading.Lock()
        self.lists = 0
        """LISTs made so far (what the cache cost the cluster)."""

    def jobs(self, namespace: str, kind: str) -> list[dict[str, Any]]:
        """The jobs, from a LIST at most ``ttl`` seconds old (made now if the last one is older).

        A failed LIST is remembered for ``ttl`` too (its error raised again), so a cluster that refuses
        is not asked once per viewer.
        """
        with self._entries_lock:
            entry = self._entries.setdefault((namespace, kind), _Entry())
        with entry.lock:  # a request arriving during a LIST waits for it and takes its result
            if entry.fetched_at is None or self._clock() - entry.fetched_at >= self._ttl:
                self.lists += 1
                try:
                    entry.items, entry.error = self._fetch(namespace, kind), None
                except Exception as error:
                    entry.items, entry.error = [], error
                entry.fetched_at = self._clock()
            if entry.error is not None:
                raise entry.error
            return entry.items
