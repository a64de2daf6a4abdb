"""The shared cache of job LISTs: one LIST per (namespace, kind) per ttl, however many readers."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_disttrain.ui.listing import SWEEP_SECONDS, JobListCache, NoAnswer, SharedListStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """Counts the LISTs and answers each with the jobs it holds now."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.jobs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.error: Exception | None = None
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def list(self, namespace: str, kind: str) -> list[dict[str, Any]]:
        self.calls.append((namespace, kind))
        self.entered.set()
        self.release.wait(10)
        if self.error is not None:
            raise self.error
        return list(self.jobs.get((namespace, kind), []))


def test_readers_within_the_ttl_share_one_list_and_a_later_one_lists_again():
    clock, cluster = Clock(), Cluster()
    cache = JobListCache(cluster.list, ttl=5, clock=clock)
    cluster.jobs[("team-a", "PyTorchJob")] = [{"metadata": {"name": "a"}}]
    for _ in range(100):
        assert cache.jobs("team-a", "PyTorchJob") == [{"metadata": {"name": "a"}}]
    assert cluster.calls == [("team-a", "PyTorchJob")]
    cluster.jobs[("team-a", "PyTorchJob")] = [{"metadata": {"name": "b"}}]
    clock.now += 4.9
    assert cache.jobs("team-a", "PyTorchJob") == [{"metadata": {"name": "a"}}]
    clock.now += 0.1
    assert cache.jobs("team-a", "PyTorchJob") == [{"metadata": {"name": "b"}}]
    assert cache.jobs("team-b", "PyTorchJob") == []
    assert cluster.calls == [("team-a", "PyTorchJob"), ("team-a", "PyTorchJob"), ("team-b", "PyTorchJob")]
    assert cache.lists == 3


def test_readers_arriving_during_a_list_wait_for_it_instead_of_listing():
    clock, cluster = Clock(), Cluster()
    cache = JobListCache(cluster.list, ttl=5, clock=clock)
    cluster.release.clear()
    results: list[list[dict[str, Any]]] = []
    readers = [threading.Thread(target=lambda: results.append(cache.jobs("ns", "MPIJob"))) for _ in range(10)]
    for reader in readers:
        reader.start()
    assert cluster.entered.wait(10)
    cluster.jobs[("ns", "MPIJob")] = [{"metadata": {"name": "m"}}]
    cluster.release.set()
    for reader in readers:
        reader.join(10)
    assert results == [[{"metadata": {"name": "m"}}]] * 10
    assert cluster.calls == [("ns", "MPIJob")]


def test_a_failed_list_is_remembered_for_the_ttl():
    clock, cluster = Clock(), Cluster()
    cache = JobListCache(cluster.list, ttl=5, clock=clock)
    cluster.error = PermissionError("forbidden: list pytorchjobs in ns")
    for _ in range(3):
        with pytest.raises(PermissionError, match="forbidden"):
            cache.jobs("ns", "PyTorchJob")
    assert len(cluster.calls) == 1
    cluster.error = None
    clock.now += 5
    assert cache.jobs("ns", "PyTorchJob") == []
    assert len(cluster.calls) == 2


def test_a_ttl_must_be_positive():
    with pytest.raises(ValueError, match="ttl must be > 0"):
        JobListCache(Cluster().list, ttl=0)


# -- shared by the API server's worker processes ---------------------------------------------------------


def test_workers_sharing_a_store_make_one_list_per_ttl_between_them(tmp_path: Path) -> None:
    clock, cluster = Clock(), Cluster()
    cluster.jobs[("ns", "PyTorchJob")] = [{"metadata": {"name": "a"}}]
    first, second = (
        JobListCache(cluster.list, ttl=5, clock=clock, store=SharedListStore(tmp_path, "jobs")) for _ in range(2)
    )

    assert first.jobs("ns", "PyTorchJob") == [{"metadata": {"name": "a"}}]
    clock.now += 4
    # The second worker's first reader takes the first worker's LIST, 4 s old: no LIST of its own.
    assert second.jobs("ns", "PyTorchJob") == [{"metadata": {"name": "a"}}]
    assert cluster.calls == [("ns", "PyTorchJob")]

    cluster.jobs[("ns", "PyTorchJob")] = [{"metadata": {"name": "b"}}]
    clock.now += 1
    assert second.jobs("ns", "PyTorchJob") == [{"metadata": {"name": "b"}}]
    assert first.jobs("ns", "PyTorchJob") == [{"metadata": {"name": "b"}}]  # the second's, fresh
    assert len(cluster.calls) == 2
    assert first.lists == second.lists == 2  # counted for all the workers
    assert oct(tmp_path.stat().st_mode & 0o777) == "0o700"
    assert {oct(path.stat().st_mode & 0o777) for path in tmp_path.iterdir()} == {"0o600"}


def test_a_failed_list_is_not_shared(tmp_path: Path) -> None:
    clock, cluster = Clock(), Cluster()
    first, second = (
        JobListCache(cluster.list, ttl=5, clock=clock, store=SharedListStore(tmp_path, "jobs")) for _ in range(2)
    )
    cluster.error = PermissionError("forbidden")
    with pytest.raises(PermissionError):
        first.jobs("ns", "MPIJob")
    cluster.error = None

    assert second.jobs("ns", "MPIJob") == []
    assert len(cluster.calls) == 2


def _worker(directory: str, start: Any, calls: Any, results: Any) -> None:
    """One API-server worker process: its own cache, sharing the directory; its LIST is counted in ``calls``."""

    def fetch(namespace: str, kind: str) -> list[dict[str, Any]]:
        with calls.get_lock():
            calls.value += 1
        return [{"metadata": {"name": "shared"}}]

    cache = JobListCache(fetch, ttl=60, store=SharedListStore(Path(directory), "jobs"))
    start.wait(10)
    results.put(cache.jobs("ns", "PyTorchJob"))


def test_worker_processes_asking_at_once_make_one_list(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")  # as the API server starts its workers
    start, calls, results = context.Event(), context.Value("i", 0), context.Queue()
    workers = [context.Process(target=_worker, args=(str(tmp_path), start, calls, results)) for _ in range(4)]
    for worker in workers:
        worker.start()
    start.set()
    answers = [results.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(30)

    assert answers == [[{"metadata": {"name": "shared"}}]] * 4
    assert calls.value == 1


def test_a_cache_directory_others_can_read_is_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    with pytest.raises(PermissionError, match="must be this user's alone"):
        SharedListStore(tmp_path, "jobs")


# -- bounded: waits, entries, files, and what a file is trusted with -----------------------------------


def test_a_reader_waits_for_another_readers_list_a_bounded_time_then_takes_the_last_good_one():
    clock, cluster = Clock(), Cluster()
    cache = JobListCache(cluster.list, ttl=5, clock=clock)
    cluster.release.clear()
    first = threading.Thread(target=lambda: cache.jobs("ns", "MPIJob"))
    first.start()
    assert cluster.entered.wait(10)
    with pytest.raises(NoAnswer, match=r"did not answer within 0\.1 s"):
        cache.jobs("ns", "MPIJob", wait=0.1)  # nothing listed yet: no answer, at once
    cluster.jobs[("ns", "MPIJob")] = [{"metadata": {"name": "m"}}]
    cluster.release.set()
    first.join(10)

    clock.now += 5  # stale: the next reader LISTs, and that LIST hangs
    cluster.release.clear()
    cluster.entered.clear()
    second = threading.Thread(target=lambda: cache.jobs("ns", "MPIJob"))
    second.start()
    assert cluster.entered.wait(10)
    assert cache.jobs("ns", "MPIJob", wait=0.1) == [{"metadata": {"name": "m"}}]  # the last good LIST
    cluster.release.set()
    second.join(10)


def test_a_worker_waits_for_another_workers_list_a_bounded_time(tmp_path: Path) -> None:
    clock = Clock()
    store = SharedListStore(tmp_path, "jobs")
    cache = JobListCache(Cluster().list, ttl=5, clock=clock, store=store)
    with store.locked(("ns", "PyTorchJob")):  # another worker is LISTing, and does not finish
        with pytest.raises(NoAnswer):
            cache.jobs("ns", "PyTorchJob", wait=0.2)
        store.write(("ns", "PyTorchJob"), clock.now - 60, [{"metadata": {"name": "old"}}])
        assert cache.jobs("ns", "PyTorchJob", wait=0.2) == [{"metadata": {"name": "old"}}]


@pytest.mark.parametrize(
    "stored",
    [
        {"fetched_at": 10**12, "items": [{"metadata": {"name": "forged"}}]},  # the future: fresh for ever
        {"fetched_at": "1000", "items": [{"metadata": {"name": "forged"}}]},
        {"fetched_at": 1000.0, "items": ["<img src=x>"]},
        {"fetched_at": 1000.0, "items": {"metadata": {}}},
        ["not", "an", "entry"],
    ],
)
def test_a_cache_file_that_is_not_what_a_worker_writes_is_not_served(tmp_path: Path, stored: Any) -> None:
    clock, cluster = Clock(), Cluster()
    store = SharedListStore(tmp_path, "jobs")
    cache = JobListCache(cluster.list, ttl=5, clock=clock, store=store)
    store._path(("ns", "PyTorchJob"), ".json").write_text(json.dumps(stored))
    cluster.jobs[("ns", "PyTorchJob")] = [{"metadata": {"name": "real"}}]
    assert cache.jobs("ns", "PyTorchJob") == [{"metadata": {"name": "real"}}]
    assert len(cluster.calls) == 1


def test_the_entries_are_bounded_in_number_and_age_and_idle_files_are_removed(tmp_path: Path) -> None:
    clock, cluster = Clock(), Cluster()
    store = SharedListStore(tmp_path, "pods")
    cache = JobListCache(cluster.list, ttl=5, clock=clock, store=store, max_entries=10, idle=100)
    for index in range(50):  # a job's tab each
        cache.jobs("ns", f"PyTorchJob/job-{index}")
    assert len(cache) == 10
    clock.now += 101
    assert len(cache) == 0  # none asked for within ``idle``
    old = time.time() - 101
    for path in tmp_path.iterdir():
        os.utime(path, (old, old))
    clock.now += SWEEP_SECONDS
    cache.jobs("ns", "PyTorchJob/job-new")
    assert sorted(path.suffix for path in tmp_path.iterdir()) == [".json", ".lock", ".lock"]  # job-new's, the counter
    assert store.lists() == 51  # the counter stays
