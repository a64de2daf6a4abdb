"""The kept pods of a job (``pods.snapshot``): trimmed to what their readers use, bounded, and merged with
a later LIST so that a pod the cluster deleted (MultiKueue's worker) stands in as last seen."""

from __future__ import annotations

import json

from airflow_provider_disttrain.pods.snapshot import MAX_MESSAGE_BYTES, PodSnapshot, gone, trim, with_kept
from tests.unit.fakes import make_pod

DONE = {"reason": "Completed", "exitCode": 0, "message": json.dumps({"loss": 0.1})}


def test_a_pod_is_trimmed_to_what_its_readers_use() -> None:
    pod = make_pod("train", "master", 0, phase="Succeeded", terminated=DONE)
    pod["metadata"].update(creationTimestamp="2024-05-01T10:00:00Z", managedFields=[{"manager": "kubelet"}])
    pod["spec"].update(nodeName="node-1", restartPolicy="Never", volumes=[{"name": "data"}])
    pod["spec"]["containers"][0].update(resources={"limits": {"nvidia.com/gpu": "1"}}, env=[{"name": "TOKEN"}])
    pod["status"].update(startTime="2024-05-01T10:00:01Z", podIP="10.0.0.1")

    trimmed = trim(pod)

    assert "managedFields" not in trimmed["metadata"] and trimmed["metadata"]["labels"] == pod["metadata"]["labels"]
    assert trimmed["spec"] == {
        "nodeName": "node-1",
        "restartPolicy": "Never",
        "containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
    }
    assert "podIP" not in trimmed["status"]
    assert trimmed["status"]["containerStatuses"] == pod["status"]["containerStatuses"]


def test_long_messages_are_cut_at_the_kubelets_bound() -> None:
    long = {**DONE, "message": "é" * MAX_MESSAGE_BYTES}
    trimmed = trim(make_pod("train", phase="Failed", terminated=long))
    message = trimmed["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
    assert len(message.encode()) <= MAX_MESSAGE_BYTES and message == "é" * (MAX_MESSAGE_BYTES // 2)


def test_the_snapshot_keeps_the_last_state_of_a_deleted_pod_and_is_bounded() -> None:
    snapshot = PodSnapshot(max_pods=2)
    finished = make_pod("train", "master", 0, phase="Succeeded", terminated=DONE)
    snapshot.apply("ADDED", make_pod("train", "master", 0))
    snapshot.apply("MODIFIED", finished)
    snapshot.apply("DELETED", finished)
    snapshot.apply("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    snapshot.apply("ADDED", make_pod("train", "worker", 0))
    snapshot.apply("ADDED", make_pod("train", "worker", 1))  # past the bound: not kept

    pods = snapshot.pods()
    assert [pod["metadata"]["name"] for pod in pods] == ["train-master-0", "train-worker-0"]
    assert pods[0]["status"]["phase"] == "Succeeded"
    assert snapshot.overflowed


def test_a_listed_pod_wins_and_a_gone_one_is_read_as_kept() -> None:
    kept = [
        trim(make_pod("train", "master", 0, phase="Succeeded", terminated=DONE)),
        trim(make_pod("train", "worker", 0)),
    ]
    listed = [make_pod("train", "worker", 0, phase="Succeeded", terminated=DONE)]

    pods = with_kept(listed, kept) or []

    assert [(p["metadata"]["name"], p["status"]["phase"]) for p in pods] == [
        ("train-worker-0", "Succeeded"),
        ("train-master-0", "Succeeded"),
    ]
    assert gone(listed, kept) == ["train-master-0"]
    assert with_kept(None, None) is None and with_kept([], None) == [] and with_kept(None, kept) == kept
