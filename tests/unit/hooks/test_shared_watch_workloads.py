"""The shared watch of Kueue Workloads, indexed on the ``job-uid`` label: Kueue replaces a job's Workload
(a new name and uid under the same label) and deletes the old one, before or after. The subscribers of
the job see the Workload that stands, whatever order the events come in: each is kept by its own uid."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from airflow_provider_disttrain.hooks.watch_registry import subscribe
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, WORKLOAD
from tests.unit.waiting import until

pytestmark = pytest.mark.usefixtures("virtual_clock")

FIRST, SECOND = "pytorchjob-train-abc-1", "pytorchjob-train-abc-2"


def workload(name: str, uid: str, created: str, **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid,
            "creationTimestamp": created,
            "labels": {JOB_UID_LABEL: "job-uid-1"},
            **metadata,
        },
        "status": {"conditions": []},
    }


PREDECESSOR = workload(FIRST, "wl-uid-1", "2030-01-01T00:00:00Z")
SUCCESSOR = workload(SECOND, "wl-uid-2", "2030-01-01T00:05:00Z")


def _job_workloads(apiserver: Any) -> Any:
    """The subscription a trigger makes for its job's Workloads."""
    connection = ClusterConnection(kubeconfig=apiserver.kubeconfig())
    return subscribe(connection, WORKLOAD, "ml", "job-uid-1", label_selector=JOB_UID_LABEL, index_label=JOB_UID_LABEL)


async def _replace(apiserver: Any, order: tuple[str, ...]) -> None:
    for step in order:
        if step == "add the successor":
            await apiserver.put(SUCCESSOR, plural="workloads")
        elif step == "mark the predecessor deleted":
            await apiserver.put(
                {**PREDECESSOR, "metadata": {**PREDECESSOR["metadata"], "deletionTimestamp": "x"}}, plural="workloads"
            )
        else:
            await apiserver.remove("ml", FIRST, plural="workloads")


ORDERS = [
    order
    for order in itertools.permutations(("add the successor", "mark the predecessor deleted", "remove the predecessor"))
    if order.index("mark the predecessor deleted") < order.index("remove the predecessor")
]


@pytest.mark.parametrize("order", ORDERS, ids=[" then ".join(order) for order in ORDERS])
async def test_the_successor_workload_stands_whatever_the_order_of_the_events(
    apiserver: Any, order: tuple[str, ...]
) -> None:
    await apiserver.put(PREDECESSOR, plural="workloads")
    async with _job_workloads(apiserver) as sub:
        await until(lambda: sub.synced and sub.entry is not None)
        assert sub.entry.job["metadata"]["uid"] == "wl-uid-1"

        await _replace(apiserver, order)
        # Judged once the watch has applied every event (the order of its looks must not matter).
        await until(lambda: sub.watch._resource_version == str(apiserver.resource_version))

        assert sub.entry is not None and not sub.entry.deleted
        assert sub.entry.job["metadata"]["uid"] == "wl-uid-2"


async def test_the_last_workloads_deletion_is_still_a_tombstone(apiserver: Any) -> None:
    await apiserver.put(PREDECESSOR, plural="workloads")
    async with _job_workloads(apiserver) as sub:
        await until(lambda: sub.synced and sub.entry is not None)

        await apiserver.remove("ml", FIRST, plural="workloads")
        await until(lambda: sub.entry is not None and sub.entry.deleted)

        assert sub.entry.job["metadata"]["uid"] == "wl-uid-1"
