"""The local cluster's controllers behave like a real cluster's (no provider code involved).

JobSet + Kubeflow Trainer run a TrainJob written like Kubeflow's examples; training-operator's
validating webhook rejects an invalid PyTorchJob; Kueue queues a labelled PyTorchJob and TrainJob,
keeps a job that exceeds the ClusterQueue's quota suspended with the Workload's reason, and leaves an
unlabelled job alone. See dev/cluster/README.md for what up.sh sets up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import CLUSTER_QUEUE, LOCAL_QUEUE

# Holds or counts the cluster's 16 GPUs (Kueue quota, node capacity): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("gpus")

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 120) -> Any:
    """Polls ``probe`` until it returns something truthy, and returns that."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return cond
    return None


def is_true(obj: dict[str, Any] | None, kind: str) -> bool:
    cond = condition(obj, kind)
    return cond is not None and cond["status"] == "True"


@pytest.fixture
def api(admin_api: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(admin_api)


# The cluster (and Kueue's quota) is shared with other tests: the jobs that must run ask for cpu only,
# so that other tests' GPU jobs cannot hold them back.
ONE_CPU = {"requests": {"cpu": "1"}}


def pytorchjob(name: str, resources: dict[str, Any], workers: int, queue: str | None = None) -> dict[str, Any]:
    """A PyTorchJob with one master and ``workers`` workers, each container with ``resources``."""

    def replica(replicas: int) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "docker.io/kubeflow/pytorch-dist-mnist:latest",
            "resources": resources,
        }
        return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": {"containers": [container]}}}

    metadata: dict[str, Any] = {"name": name}
    if queue:
        metadata["labels"] = {QUEUE_LABEL: queue}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


def create_pytorchjob(api: client.CustomObjectsApi, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    return api.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", body)


def get_pytorchjob(api: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return api.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)


def workloads_of(api: client.CustomObjectsApi, namespace: str, owner: str) -> list[dict[str, Any]]:
    items = api.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]
    return [w for w in items if any(ref["name"] == owner for ref in w["metadata"].get("ownerReferences") or [])]


def test_trainjob_runs_as_a_jobset_and_completes(api, admin_api, namespace):
    # As in Kubeflow Trainer's examples: a torch-distributed TrainJob with two nodes.
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "pytorch-simple"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 2,
                "image": "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",
                "command": ["torchrun", "train.py"],
                "resourcesPerNode": {"requests": {"cpu": "2", "memory": "4Gi"}},
            },
        },
    }
    api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", trainjob)

    def get_trainjob() -> dict[str, Any]:
        return api.get_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", "pytorch-simple"
        )

    done = wait_for("TrainJob Complete=True", lambda: is_true(get_trainjob(), "Complete") and get_trainjob())
    assert condition(done, "Failed") is None
    assert done["status"]["jobsStatus"] == [
        {"name": "node", "active": 0, "failed": 0, "ready": 0, "succeeded": 1, "suspended": 0}
    ]

    jobset = api.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", "pytorch-simple")
    assert [ref["kind"] for ref in jobset["metadata"]["ownerReferences"]] == ["TrainJob"]
    assert is_true(jobset, "Completed")
    pods = (
        client.CoreV1Api(admin_api)
        .list_namespaced_pod(namespace, label_selector="jobset.sigs.k8s.io/jobset-name=pytorch-simple")
        .items
    )
    assert sorted(p.metadata.labels["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1"]
    assert {p.status.phase for p in pods} == {"Succeeded"}
    assert {p.spec.containers[0].resources.requests["cpu"] for p in pods} == {"2"}


def test_kueue_admits_a_queued_trainjob_and_its_jobset_is_not_queued_again(api, namespace):
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "queued-train", "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"requests": {"cpu": "2"}}},
        },
    }
    created = api.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", trainjob)

    assert created["spec"]["suspend"] is True
    workload = wait_for(
        "the Workload admitted",
        lambda: next((w for w in workloads_of(api, namespace, "queued-train") if is_true(w, "Admitted")), None),
    )
    assert [ref["kind"] for ref in workload["metadata"]["ownerReferences"]] == ["TrainJob"]
    assert workload["status"]["admission"]["clusterQueue"] == CLUSTER_QUEUE

    def get_trainjob() -> dict[str, Any]:
        return api.get_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs", "queued-train"
        )

    wait_for("TrainJob Complete=True", lambda: is_true(get_trainjob(), "Complete"))
    # The JobSet the TrainJob runs as is owned by a job Kueue manages: no Workload of its own.
    items = api.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]
    assert [w["metadata"]["name"] for w in items] == [workload["metadata"]["name"]]


def test_training_operator_webhook_rejects_an_invalid_pytorchjob(api, namespace):
    body = pytorchjob("two-masters", ONE_CPU, workers=1)
    body["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2

    with pytest.raises(ApiException) as raised:
        create_pytorchjob(api, namespace, body)

    assert raised.value.status == 403
    message = json.loads(raised.value.body)["message"]
    assert message == (
        'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: '
        "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1"
    )
    assert api.list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")["items"] == []


def test_kueue_admits_a_queued_pytorchjob(api, namespace):
    created = create_pytorchjob(api, namespace, pytorchjob("queued", ONE_CPU, workers=1, queue=LOCAL_QUEUE))

    # Kueue's webhook suspends it at creation; it runs once its Workload is admitted.
    assert created["spec"]["runPolicy"]["suspend"] is True
    workload = wait_for(
        "the Workload admitted",
        lambda: next((w for w in workloads_of(api, namespace, "queued") if is_true(w, "Admitted")), None),
    )
    assert workload["spec"]["queueName"] == LOCAL_QUEUE
    assert workload["status"]["admission"]["clusterQueue"] == CLUSTER_QUEUE
    wait_for("the PyTorchJob Succeeded", lambda: is_true(get_pytorchjob(api, namespace, "queued"), "Succeeded"))
    assert get_pytorchjob(api, namespace, "queued")["spec"]["runPolicy"]["suspend"] is False


def test_kueue_keeps_a_job_over_quota_suspended_with_its_reason(api, admin_api, namespace):
    # 3 x 8 GPUs: more than the ClusterQueue's 16 nvidia.com/gpu.
    create_pytorchjob(
        api, namespace, pytorchjob("too-big", {"limits": {"nvidia.com/gpu": 8}}, workers=2, queue=LOCAL_QUEUE)
    )

    def pending_workload() -> dict[str, Any] | None:
        for w in workloads_of(api, namespace, "too-big"):
            cond = condition(w, "QuotaReserved")
            if cond and cond["status"] == "False" and "insufficient" in cond["message"]:
                return w
        return None

    workload = wait_for("the Workload's QuotaReserved=False", pending_workload)
    message = condition(workload, "QuotaReserved")["message"]
    assert "nvidia.com/gpu" in message, message
    # Kueue v0.19 with UnadmittedWorkloadsObservability (dev/cluster/controllers.sh) says it can never fit.
    assert condition(workload, "QuotaReserved")["reason"] == "ExceedsMaxQuota"
    assert "> maximum capacity (16)" in message, message
    assert not is_true(workload, "Admitted")
    job = get_pytorchjob(api, namespace, "too-big")
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert is_true(job, "Suspended")
    assert client.CoreV1Api(admin_api).list_namespaced_pod(namespace).items == []


def test_an_unlabelled_job_runs_without_kueue(api, namespace):
    created = create_pytorchjob(api, namespace, pytorchjob("unqueued", ONE_CPU, workers=1))

    assert not (created["spec"].get("runPolicy") or {}).get("suspend")
    wait_for("the PyTorchJob Succeeded", lambda: is_true(get_pytorchjob(api, namespace, "unqueued"), "Succeeded"))
    assert workloads_of(api, namespace, "unqueued") == []
