"""MultiKueue: a deferred task killed while its job runs on a worker cluster (the trigger's ``on_kill``)
deletes the job on the manager and says whether Kueue removed the job's copy on the worker, as the sync
task's ``on_kill`` and a timeout's ending do. Two fake API servers: the manager and the worker."""

# ruff: noqa: F811  (the fixtures imported from the MultiKueue trigger tests are the tests' parameters)

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import pytest

from airflow_provider_disttrain.kueue.dispatch import WorkerClusters
from airflow_provider_disttrain.utils import clock
from tests.unit.fakes import make_job, running_status
from tests.unit.triggers.helpers import make_trigger
from tests.unit.triggers.test_training_job_multikueue import (  # noqa: F401 (fixtures)
    NAMESPACE,
    dispatched_workload,
    lines,
    logged,
    queued_job,
    worker,
    workers_mapped,
)

pytestmark = pytest.mark.usefixtures("virtual_clock")

TITLE = f"PyTorchJob {NAMESPACE}/train-abc"


async def dispatched(manager: Any, worker: Any, *, copy: bool) -> None:
    """A running job on the manager, dispatched to ``worker-1``; ``copy``: Kueue's copy is on the worker."""
    await manager.put(queued_job("train-abc", "uid-1", running_status()))
    await manager.put(dispatched_workload("train-abc", "uid-1", "worker-1"), plural="workloads")
    if copy:
        await worker.put(make_job("train-abc", NAMESPACE, uid="uid-of-the-copy", status=running_status()))


async def test_the_job_is_deleted_on_the_manager_and_kueues_removal_of_the_copy_is_awaited(
    apiserver: Any, worker: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    await dispatched(apiserver, worker, copy=True)

    async def kueue_removes_the_copy() -> None:
        while (NAMESPACE, "pytorchjobs", "train-abc") in apiserver.objects:
            await clock.current().sleep(0.1)
        await clock.current().sleep(2)  # MultiKueue's own time
        await worker.remove(NAMESPACE, "train-abc")

    kueue = asyncio.create_task(kueue_removes_the_copy())
    await make_trigger(apiserver, delete_on_kill=True, worker_clusters=workers_mapped()).on_kill()
    await kueue

    assert (NAMESPACE, "pytorchjobs", "train-abc") not in apiserver.objects
    assert worker.count("delete") == 0  # deleted on the manager only: the copy is Kueue's
    assert f"{TITLE} was deleted. Its copy on worker cluster 'worker-1' is gone too." in lines(logged)


async def test_a_copy_still_there_after_the_kills_bound_is_said(
    apiserver: Any, worker: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    await dispatched(apiserver, worker, copy=True)

    await make_trigger(apiserver, delete_on_kill=True, worker_clusters=workers_mapped()).on_kill()

    assert (NAMESPACE, "pytorchjobs", "train-abc") in worker.objects
    assert any(
        line.startswith(f"{TITLE} was deleted. Its copy on worker cluster 'worker-1' still exists 4s later")
        for line in lines(logged)
    )


async def test_without_a_mapping_nothing_more_is_read(apiserver: Any, worker: Any) -> None:
    await dispatched(apiserver, worker, copy=True)

    await make_trigger(apiserver, delete_on_kill=True).on_kill()

    assert apiserver.count("delete") == 1 and apiserver.count("get") == 0 and apiserver.count("list") == 0
    assert worker.requests == []


async def test_a_worker_connection_that_does_not_exist_leaves_the_deletion_standing(
    apiserver: Any, worker: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    await dispatched(apiserver, worker, copy=True)
    workers = WorkerClusters({"worker-1": "k8s_missing"}).to_dict()

    await make_trigger(apiserver, delete_on_kill=True, worker_clusters=workers).on_kill()

    assert (NAMESPACE, "pytorchjobs", "train-abc") not in apiserver.objects
    assert any(
        line.startswith(f"{TITLE} was deleted. Whether its copy on worker cluster 'worker-1' is gone could not be read")
        for line in lines(logged)
    )
