"""The shared cache of job LISTs: one LIST per (namespace, kind) per ttl, however many readers."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from airflow_provider_disttrain.ui.listing import JobListCache


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
