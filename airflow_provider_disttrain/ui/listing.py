"""A short-lived cache of job LISTs shared by everyone looking at the UI in one API-server process.

However many people have the tab or the page open, the cluster sees at most one LIST per (namespace,
kind) per ``ttl`` seconds: the first request after the entry expires makes it, requests that arrive
meanwhile wait for that one (single flight) instead of making their own. With a ``SharedListStore`` the
API server's worker processes on one host share the LISTs too (a file per entry, an ``flock`` for the
single flight across processes), so N workers still make one LIST per ``ttl``, not N.

No clock of its own (``clock`` is injected; wall time, since processes compare their stamps) and no
client: ``fetch`` is the one call that reads the cluster, so the cache is tested without either.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
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


class SharedListStore:
    """LIST results shared by the processes of one host that use ``directory`` (the API server's workers).

    One JSON file per entry, replaced atomically; an ``flock`` per entry makes the process that finds it
    stale the only one to LIST while the others wait and then read its file; a counter file counts the
    LISTs of all of them. Files, not shared memory or a server: the workers are forked by the API server,
    not by us, and nothing else runs beside them. The directory is the Airflow user's alone (0700): the
    entries hold jobs and pods as the cluster returns them (what any reader of the namespace sees).
    A failed LIST is not shared: each process remembers its own failure for the ttl.
    """

    def __init__(self, directory: Path, name: str) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        status = directory.stat()
        if status.st_uid != os.getuid() or status.st_mode & 0o077:
            raise PermissionError(f"{directory}: the UI's cache directory must be this user's alone (mode 0700)")
        self.directory = directory
        self.name = name

    def _path(self, key: tuple[str, str], suffix: str) -> Path:
        digest = hashlib.sha256(json.dumps([self.name, *key]).encode()).hexdigest()[:32]
        return self.directory / f"{self.name}-{digest}{suffix}"

    @contextlib.contextmanager
    def _flock(self, path: Path) -> Iterator[int]:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield descriptor
        finally:
            os.close(descriptor)  # releases the lock

    @contextlib.contextmanager
    def locked(self, key: tuple[str, str]) -> Iterator[None]:
        """Held while one process decides whether to LIST ``key``, and LISTs it."""
        with self._flock(self._path(key, ".lock")):
            yield

    def read(self, key: tuple[str, str]) -> tuple[float, list[dict[str, Any]]] | None:
        """``(fetched_at, items)`` of the last LIST any process stored, or None."""
        try:
            stored = json.loads(self._path(key, ".json").read_text())
            return float(stored["fetched_at"]), list(stored["items"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, key: tuple[str, str], fetched_at: float, items: list[dict[str, Any]]) -> None:
        path = self._path(key, ".json")
        partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
        with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
            json.dump({"fetched_at": fetched_at, "items": items}, file)
        os.replace(partial, path)

    def add_list(self) -> None:
        with self._flock(self.directory / f"{self.name}-lists.lock") as descriptor:
            count = int(os.pread(descriptor, 32, 0) or b"0") + 1
            os.pwrite(descriptor, str(count).encode().ljust(32), 0)

    def lists(self) -> int:
        """LISTs made by every process using the directory."""
        try:
            return int((self.directory / f"{self.name}-lists.lock").read_bytes() or b"0")
        except (OSError, ValueError):
            return 0


class JobListCache:
    """Jobs per (namespace, kind), re-read at most once per ``ttl`` seconds (by this process, or by any
    process sharing ``store``)."""

    def __init__(
        self,
        fetch: Fetch,
        *,
        ttl: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
        store: SharedListStore | None = None,
    ):
        if ttl <= 0:
            raise ValueError(f"ttl must be > 0 seconds, got {ttl!r}")
        self._fetch = fetch
        self._ttl = ttl
        self._clock = clock
        self._store = store
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._entries_lock = threading.Lock()
        self._lists = 0

    @property
    def lists(self) -> int:
        """LISTs made so far (what the cache cost the cluster): by every process sharing the store."""
        return self._store.lists() if self._store is not None else self._lists

    def jobs(self, namespace: str, kind: str) -> list[dict[str, Any]]:
        """The jobs, from a LIST at most ``ttl`` seconds old (made now if the last one is older).

        A failed LIST is remembered for ``ttl`` too (its error raised again), so a cluster that refuses
        is not asked once per viewer.
        """
        with self._entries_lock:
            entry = self._entries.setdefault((namespace, kind), _Entry())
        with entry.lock:  # a request arriving during a LIST waits for it and takes its result
            if not self._fresh(entry.fetched_at):
                if self._store is None:
                    self._list(entry, namespace, kind)
                else:
                    self._list_shared(entry, namespace, kind)
            if entry.error is not None:
                raise entry.error
            return entry.items

    def _fresh(self, fetched_at: float | None) -> bool:
        return fetched_at is not None and self._clock() - fetched_at < self._ttl

    def _list(self, entry: _Entry, namespace: str, kind: str) -> None:
        self._lists += 1
        if self._store is not None:
            self._store.add_list()
        try:
            entry.items, entry.error = self._fetch(namespace, kind), None
        except Exception as error:
            entry.items, entry.error = [], error
        entry.fetched_at = self._clock()

    def _list_shared(self, entry: _Entry, namespace: str, kind: str) -> None:
        """Another process's LIST if it is fresh (waiting for one in progress), else ours, stored for them."""
        assert self._store is not None
        key = (namespace, kind)
        with self._store.locked(key):
            stored = self._store.read(key)
            if stored is not None and self._fresh(stored[0]):
                entry.fetched_at, entry.items = stored
                entry.error = None
                return
            self._list(entry, namespace, kind)
            if entry.error is None:
                self._store.write(key, entry.fetched_at or self._clock(), entry.items)
