"""A short-lived cache of job LISTs shared by everyone looking at the UI in one API-server process.

However many people have the tab or the page open, the cluster sees at most one LIST per (namespace,
kind) per ``ttl`` seconds: the first request after the entry expires makes it, requests that arrive
meanwhile wait for that one (single flight) instead of making their own. With a ``SharedListStore`` the
API server's worker processes on one host share the LISTs too (a file per entry, an ``flock`` for the
single flight across processes), so N workers still make one LIST per ``ttl``, not N.

Nothing here waits without a bound: a reader waits for another's LIST at most ``wait`` seconds (then
it takes the last good LIST, or ``NoAnswer``), the entries are bounded in number and age (LRU with
expiry), and the files of entries nobody asked for lately are removed.

No clock of its own (``clock`` is injected; wall time, since processes compare their stamps) and no
client: ``fetch`` is the one call that reads the cluster, so the cache is tested without either.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cachetools

DEFAULT_TTL_SECONDS = 5.0
# Entries (namespace, kind) or (namespace, one job's pods) kept per process: every job viewed adds one.
MAX_ENTRIES = 1024
# An entry (and its file) nobody asked for in this long is dropped: a tab closed, a job deleted.
IDLE_SECONDS = 600.0
# How often a process looks for the files of idle entries, and how long a stamp may be ahead of this
# host's clock (the processes share one clock; more is a file not to trust).
SWEEP_SECONDS = 60.0
CLOCK_SKEW_SECONDS = 1.0
# fcntl.flock has no timeout: a waiter polls a non-blocking flock this often until its wait is over.
FLOCK_POLL_SECONDS = 0.05

Fetch = Callable[[str, str], list[dict[str, Any]]]
"""``fetch(namespace, key)``: what ``key`` names in ``namespace`` (the provider's jobs of a kind; one job's pods)."""


class NoAnswer(Exception):
    """The cluster (or the request LISTing it for everyone) did not answer within the wait: a 504."""


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    fetched_at: float | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    error: Exception | None = None
    # The last LIST that succeeded: what a reader that cannot wait longer is served (stale, not nothing).
    last_good: list[dict[str, Any]] | None = None


def _valid_stamp(value: Any, now: float) -> float | None:
    """A ``fetched_at`` read back from a file, if it is a time that can be true: a number, not in the future."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if value <= now + CLOCK_SKEW_SECONDS else None


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
    def _flock(self, path: Path, wait: float | None = None) -> Iterator[int]:
        """The file's exclusive lock; with ``wait``, ``NoAnswer`` when it is not had within that many seconds."""
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if wait is None:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
            else:
                deadline = time.monotonic() + wait
                while True:
                    try:
                        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise NoAnswer(f"another worker's LIST took longer than {wait:g} s") from None
                        time.sleep(min(FLOCK_POLL_SECONDS, left))
            yield descriptor
        finally:
            os.close(descriptor)  # releases the lock

    @contextlib.contextmanager
    def locked(self, key: tuple[str, str], wait: float | None = None) -> Iterator[None]:
        """Held while one process decides whether to LIST ``key``, and LISTs it (waited for at most ``wait``)."""
        with self._flock(self._path(key, ".lock"), wait):
            yield

    def read(self, key: tuple[str, str], now: float) -> tuple[float, list[dict[str, Any]]] | None:
        """``(fetched_at, items)`` of the last LIST any process stored, or None: also when the file is not
        what ``write`` writes (a stamp in the future would be fresh for ever, items not a list of objects)."""
        try:
            stored = json.loads(self._path(key, ".json").read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(stored, dict):
            return None
        fetched_at, items = _valid_stamp(stored.get("fetched_at"), now), stored.get("items")
        if fetched_at is None or not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            return None
        return fetched_at, items

    def write(self, key: tuple[str, str], fetched_at: float, items: list[dict[str, Any]]) -> None:
        path = self._path(key, ".json")
        partial = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
        with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
            json.dump({"fetched_at": fetched_at, "items": items}, file)
        os.replace(partial, path)

    def sweep(self, now: float, idle: float = IDLE_SECONDS) -> int:
        """Remove the entries' files (and lock files) not written for ``idle`` seconds; how many went.
        The LIST counter stays. A lock removed while a process holds it costs at most one extra LIST."""
        removed = 0
        for path in self.directory.glob(f"{self.name}-*"):
            if path.name == f"{self.name}-lists.lock":
                continue
            with contextlib.suppress(OSError):  # another process swept it first
                if now - path.stat().st_mtime > idle:
                    path.unlink()
                    removed += 1
        return removed

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
        max_entries: int = MAX_ENTRIES,
        idle: float = IDLE_SECONDS,
    ):
        if ttl <= 0:
            raise ValueError(f"ttl must be > 0 seconds, got {ttl!r}")
        self._fetch = fetch
        self._ttl = ttl
        self._clock = clock
        self._store = store
        self._idle = max(idle, ttl)
        # Least recently used entries go first, and any entry not asked for within ``idle``.
        self._entries: cachetools.TTLCache[tuple[str, str], _Entry] = cachetools.TTLCache(
            maxsize=max_entries, ttl=self._idle, timer=clock
        )
        self._entries_lock = threading.Lock()
        self._lists = 0
        self._swept_at = clock()

    @property
    def lists(self) -> int:
        """LISTs made so far (what the cache cost the cluster): by every process sharing the store."""
        return self._store.lists() if self._store is not None else self._lists

    def __len__(self) -> int:
        return len(self._entries)

    def jobs(self, namespace: str, kind: str, *, wait: float | None = None) -> list[dict[str, Any]]:
        """The jobs, from a LIST at most ``ttl`` seconds old (made now if the last one is older).

        A failed LIST is remembered for ``ttl`` too (its error raised again), so a cluster that refuses
        is not asked once per viewer. ``wait``: how long a reader waits for a LIST another request is
        making; past it, the last good LIST (however old), or ``NoAnswer`` when there is none.
        """
        key = (namespace, kind)
        deadline = None if wait is None else time.monotonic() + wait
        with self._entries_lock:
            entry = self._entries.get(key) or _Entry()
            self._entries[key] = entry  # (re)inserted: its idle time starts again
        self._sweep()
        # A request arriving during a LIST waits for it and takes its result, for at most ``wait``.
        if not entry.lock.acquire(timeout=-1 if wait is None else max(wait, 0.0)):
            return self._stale(entry, wait)
        try:
            if not self._fresh(entry.fetched_at):
                if self._store is None:
                    self._list(entry, namespace, kind)
                else:
                    left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                    self._list_shared(entry, namespace, kind, left)
            if entry.error is not None:
                raise entry.error
            return entry.items
        finally:
            entry.lock.release()

    def _stale(self, entry: _Entry, wait: float | None) -> list[dict[str, Any]]:
        if entry.last_good is not None:
            return entry.last_good
        raise NoAnswer(f"the cluster did not answer within {wait or 0:g} s (another request is reading it)")

    def _sweep(self) -> None:
        """Now and then, the store's files nobody asked for within ``idle`` are removed."""
        now = self._clock()
        if self._store is None or now - self._swept_at < SWEEP_SECONDS:
            return
        self._swept_at = now
        self._store.sweep(time.time(), self._idle)  # against the files' times: the file system's clock

    def _fresh(self, fetched_at: float | None) -> bool:
        # Not fresh either when it is ahead of the clock by more than the skew (the wall clock went back).
        return fetched_at is not None and -CLOCK_SKEW_SECONDS <= self._clock() - fetched_at < self._ttl

    def _list(self, entry: _Entry, namespace: str, kind: str) -> None:
        self._lists += 1
        if self._store is not None:
            self._store.add_list()
        try:
            entry.items, entry.error = self._fetch(namespace, kind), None
            entry.last_good = entry.items
        except Exception as error:
            entry.items, entry.error = [], error
        entry.fetched_at = self._clock()

    def _list_shared(self, entry: _Entry, namespace: str, kind: str, wait: float | None) -> None:
        """Another process's LIST if it is fresh (waiting for one in progress), else ours, stored for them."""
        assert self._store is not None
        key = (namespace, kind)
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self._store.locked(key, wait))
            except NoAnswer:
                # Another worker is still LISTing: its last stored LIST (any age), else ours, else no answer.
                stored = self._store.read(key, self._clock())
                if stored is not None:
                    entry.last_good = stored[1]
                entry.items, entry.error = self._stale(entry, wait), None
                return
            stored = self._store.read(key, self._clock())
            if stored is not None and self._fresh(stored[0]):
                entry.fetched_at, entry.items = stored
                entry.last_good, entry.error = entry.items, None
                return
            self._list(entry, namespace, kind)
            if entry.error is None:
                self._store.write(key, entry.fetched_at or self._clock(), entry.items)
