"""Queue positions from the real Kueue v0.19 visibility server, as the provider reads them.

Kueue's visibility API is an aggregated API: on a real cluster the provider reaches it through the
API server (``/apis/visibility.kueue.x-k8s.io/...``). On this machine the API server cannot route to
it (an APIService needs an endpoint that is not loopback, and the workplace's network rule allows no
other), so the local cluster serves it on loopback (dev/cluster/controllers.sh) and these tests point
the provider's connection at it directly: the provider's own requests (the sync hook's and the
triggerer's shared poller's), authenticated with the provider's service-account token, which Kueue
checks with the API server (TokenReview) and authorizes against the documented Role
(SubjectAccessReview: ``get`` on ``localqueues/pendingworkloads``).

Three 2-GPU jobs in a ClusterQueue of 2 GPUs: the first runs, the other two wait, in order; the sync
wait's line says the third's place and that one admission is too little history for a start estimate.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog
import yaml

from airflow_provider_disttrain.hooks.cluster_client import ClusterClient
from airflow_provider_disttrain.hooks.kueue import KueueWaitReporter, QueuePositionReader
from airflow_provider_disttrain.hooks.queue_positions import LocalQueuePositions, cluster_fetch
from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.hold import held_by_kueue
from airflow_provider_disttrain.utils.clock import SYSTEM
from tests.integration.conftest import SmallQueue, gpu_pool, own_queue, wait_until
from tests.integration.test_kueue import _condition

REPO = Path(__file__).resolve().parents[2]
VISIBILITY_PORT = int(os.environ.get("DEVCLUSTER_KUEUE_VISIBILITY_PORT", "18085"))
LOCAL_QUEUE = "positions"


@pytest.fixture
def two_gpu_queue(admin_api: Any, namespace: str) -> Iterator[SmallQueue]:
    from kubernetes import client

    custom = client.CustomObjectsApi(admin_api)
    # Its quota and the jobs it admits on a node of its own: no other test counts or takes them.
    with (
        gpu_pool(admin_api, namespace, gpus_per_node=2) as pool,
        own_queue(custom, namespace, LOCAL_QUEUE, gpus=2, flavor=pool.flavor) as cluster_queue,
    ):
        yield SmallQueue(custom, namespace, cluster_queue, pool.flavor, name=LOCAL_QUEUE)


def _visibility_kubeconfig(service_account_kubeconfig: Path, tmp_path: Path) -> Path:
    """The provider's kubeconfig (its service account's token), aimed at Kueue's visibility server."""
    config = yaml.safe_load(service_account_kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{VISIBILITY_PORT}"
    path = tmp_path / "visibility-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_provider_reads_each_waiting_jobs_place_from_the_real_visibility_server(
    namespace, jobs, two_gpu_queue, service_account_kubeconfig, tmp_path, monkeypatch
):
    for name in ("first", "second", "third"):
        two_gpu_queue.submit_blocker(name, gpus=2, run_seconds=120)
        # Kueue orders a queue by creation time, which the API gives to the second: one per second.
        time.sleep(1.1)

    def admitted_first() -> dict[str, dict[str, Any]] | None:
        """The Workloads by job name, once Kueue admitted the first (2 GPUs of 2) and holds the other two."""
        found = {(w["metadata"].get("ownerReferences") or [{}])[0].get("name"): w for w in two_gpu_queue.workloads()}
        if set(found) != {"first", "second", "third"}:
            return None
        admitted = {name for name, w in found.items() if _condition(w, "Admitted").get("status") == "True"}
        return found if admitted == {"first"} else None

    workloads = wait_until("Kueue to admit the first job and hold the other two", admitted_first)
    names = {name: w["metadata"]["name"] for name, w in workloads.items() if w}

    kubeconfig = _visibility_kubeconfig(service_account_kubeconfig, tmp_path)
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUEUE_VISIBILITY",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}),
    )

    # The sync wait's reader (the worker's client, through TrainingJobHook.pending_workloads).
    reader = QueuePositionReader(TrainingJobHook(conn_id="kueue_visibility"), structlog.get_logger())
    second = reader.position(namespace, LOCAL_QUEUE, names["second"])
    third = reader.position(namespace, LOCAL_QUEUE, names["third"])
    assert reader.position(namespace, LOCAL_QUEUE, names["first"]) is None  # admitted: not pending
    assert second is not None and third is not None
    assert (second.in_local_queue, third.in_local_queue) == (0, 1)
    assert third.describe() == "position 2 of 2 in LocalQueue 'positions' (2 in its ClusterQueue)"

    # The triggerer's shared poller (kubernetes_asyncio, through the cluster's shared client).
    async def poll_once() -> tuple[Any, Any]:
        cluster = ClusterClient(ClusterConnection(conn_id="kueue_visibility"))
        try:
            queue = LocalQueuePositions(namespace, LOCAL_QUEUE, cluster_fetch(cluster, namespace, LOCAL_QUEUE), SYSTEM)
            woken = asyncio.Event()
            queue.follow(names["third"], woken)
            await asyncio.wait_for(woken.wait(), 30)
            queue.unfollow(woken)
            return queue.position(names["second"]), queue.position(names["third"])
        finally:
            await cluster.close()

    async_second, async_third = asyncio.run(poll_once())
    assert (async_second, async_third) == (second, third)

    # The start estimate (kueue.estimate) of the sync wait's line: the admissions from the Workloads the
    # provider's connection lists through the API server, the place from the visibility server. One
    # admission (the first job's) in the window is too little history: the line says so, with no number.
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUEUE_API",
        json.dumps(
            {
                "conn_type": "kubernetes",
                "extra": {"kube_config_path": str(service_account_kubeconfig), "namespace": namespace},
            }
        ),
    )
    api, visibility = TrainingJobHook(conn_id="kueue_api"), TrainingJobHook(conn_id="kueue_visibility")
    hook = SimpleNamespace(
        find_workload=api.find_workload,
        list_workloads=api.list_workloads,
        pending_workloads=visibility.pending_workloads,
    )
    job = wait_until(
        "the third job to be suspended by Kueue",
        lambda: (found := api.get_job("PyTorchJob", "third", namespace)) and held_by_kueue(found) and found,
    )
    with structlog.testing.capture_logs() as logs:
        message = KueueWaitReporter(hook, structlog.get_logger()).observe(job)
    assert message is not None
    assert "; position 2 of 2 in LocalQueue 'positions' (2 in its ClusterQueue); queued since " in message
    assert message.endswith(
        f"; no start estimate: position 2 in ClusterQueue {two_gpu_queue.cluster_queue}; only 1 admission there in "
        "the last 30 min (at least 3 make an estimate): too little history to say"
    )
    assert [entry["event"] for entry in logs] == [f"PyTorchJob {namespace}/third is queued by Kueue: {message}"]


def test_without_the_roles_visibility_rule_the_reader_says_so_once_and_stops(
    namespace, admin_api, jobs, two_gpu_queue, service_account_kubeconfig, tmp_path, monkeypatch
):
    """The namespace's default service account holds no Role: Kueue's SubjectAccessReview refuses it."""
    from kubernetes import client

    token = (
        client.CoreV1Api(admin_api)
        .create_namespaced_service_account_token("default", namespace, {"spec": {"expirationSeconds": 600}})
        .status.token
    )
    config = yaml.safe_load(_visibility_kubeconfig(service_account_kubeconfig, tmp_path).read_text())
    config["users"][0]["user"] = {"token": token}
    kubeconfig = tmp_path / "unprivileged-kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUEUE_VISIBILITY",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}),
    )
    reader = QueuePositionReader(TrainingJobHook(conn_id="kueue_visibility"), structlog.get_logger())

    with structlog.testing.capture_logs() as logs:
        assert reader.position(namespace, LOCAL_QUEUE, "any") is None
        assert reader.position(namespace, LOCAL_QUEUE, "any") is None

    assert reader.unavailable
    warnings = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1 and "403" in warnings[0] and "localqueues/pendingworkloads" in warnings[0]
