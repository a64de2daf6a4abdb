"""Real PyTorch DDP on the executing node: PyTorchJobs (Master + 2 Workers) that the real training-operator
turns into pods, whose processes form a gloo process group from exactly the environment the operator
injected (MASTER_ADDR = the Master's Service name, resolved by the node to the Master pod's address).

PyTorch training needs no root: every namespace here enforces the PodSecurity ``restricted`` profile,
so the pods run as a non-root user, without privilege escalation or capabilities, with the runtime's
seccomp profile, and keep their data on a PersistentVolumeClaim (the profile admits no hostPath volume)
bound to a local PersistentVolume, which their ``fsGroup`` makes theirs to write.
"""

from __future__ import annotations

import csv
import json
import random
import re
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.executing_node import (
    RESTRICTED_CONTAINER_SECURITY,
    RESTRICTED_POD_SECURITY,
    enforce_restricted,
    ensure_training_volume,
    shared_storage,
    wait_for_pod,
)

# Trains for real on the executing node (CPU-bound): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("executing")

TIMEOUT = 240
CLAIM = {"name": "data", "persistentVolumeClaim": {"claimName": "training-data"}}


@pytest.fixture
def restricted(admin_api: Any, executing: str) -> str:
    from kubernetes import client

    enforce_restricted(client.CoreV1Api(admin_api), executing)
    return executing


@pytest.fixture
def storage(admin_api: Any, restricted: str) -> Iterator[Path]:
    """The directory behind the namespace's ``training-data`` claim (a local PersistentVolume), which the
    pods' non-root user may write: the node gives it the pods' ``fsGroup``."""
    ensure_training_volume(admin_api, restricted)
    directory = shared_storage(restricted)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def pytorch_job(name: str, command: list[str], with_data: bool = False, workers: int = 2) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "pytorch",
        "image": "disttrain-pytorch:local",
        "command": command,
        "securityContext": RESTRICTED_CONTAINER_SECURITY,
    }
    pod_spec: dict[str, Any] = {"securityContext": RESTRICTED_POD_SECURITY, "containers": [container]}
    if with_data:
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        pod_spec["volumes"] = [CLAIM]
    replica = {"restartPolicy": "OnFailure", "template": {"spec": pod_spec}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, **replica}, "Worker": {"replicas": workers, **replica}},
        },
    }


def restricted_manifest() -> dict[str, Any]:
    """The part of a PyTorchJob that makes its pods meet the ``restricted`` profile, for ``job_manifest``."""
    pod = {
        "securityContext": RESTRICTED_POD_SECURITY,
        "containers": [{"name": "pytorch", "securityContext": RESTRICTED_CONTAINER_SECURITY}],
    }
    # The builder sets the Workers' count (num_workers); the Master's is the manifest's.
    master = {"replicas": 1, "template": {"spec": pod}}
    return {"spec": {"pytorchReplicaSpecs": {"Master": master, "Worker": {"template": {"spec": pod}}}}}


def run_job(admin_api: Any, jobs: Any, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    """Submits the job and waits until it has succeeded; fails with its conditions otherwise."""
    from kubernetes import client

    client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", job
    )
    name = job["metadata"]["name"]

    def conditions() -> dict[str, str]:
        found = jobs.get("pytorchjobs", namespace, name) or {}
        return {c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions") or []}

    jobs.wait_for(
        lambda: conditions().get("Succeeded") == "True" or conditions().get("Failed") == "True",
        TIMEOUT,
        f"{name} to finish",
    )
    assert conditions().get("Succeeded") == "True", conditions()
    return jobs.get("pytorchjobs", namespace, name)


def pod_log(core: Any, namespace: str, name: str) -> str:
    return str(core.read_namespaced_pod_log(name, namespace, _preload_content=False).data.decode())


def termination_message(core: Any, namespace: str, pod: str) -> dict[str, Any]:
    status = core.read_namespaced_pod(pod, namespace).status.container_statuses[0]
    return json.loads(status.state.terminated.message)


ALL_REDUCE = textwrap.dedent(
    """
    import json, os
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the operator
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    where = f"on {os.environ['HOSTNAME']} via {os.environ['MASTER_ADDR']}"
    print(f"rank {rank} of {world} {where}: sum {total.item():g}", flush=True)
    if rank == 0:
        with open("/dev/termination-log", "w") as message:
            json.dump({"sum": total.item(), "world_size": world}, message)
    dist.destroy_process_group()
    """
)


def test_the_ranks_of_a_pytorchjob_all_reduce_over_gloo(admin_api, jobs, restricted):
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    # The namespace really enforces the profile: a pod that would run as root is refused.
    with pytest.raises(client.exceptions.ApiException) as refused:
        core.create_namespaced_pod(
            restricted, {"metadata": {"name": "root"}, "spec": {"containers": [{"name": "c", "image": "python"}]}}
        )
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:latest"' in json.loads(refused.value.body)["message"]
    run_job(admin_api, jobs, restricted, pytorch_job("allreduce", ["python", "-c", ALL_REDUCE]))

    assert termination_message(core, restricted, "allreduce-master-0") == {"sum": 3.0, "world_size": 3}
    pods = {"allreduce-master-0": 0, "allreduce-worker-0": 1, "allreduce-worker-1": 2}
    for pod, rank in pods.items():
        assert f"rank {rank} of 3 on {pod} via allreduce-master-0: sum 3" in pod_log(core, restricted, pod)
    addresses = {core.read_namespaced_pod(pod, restricted).status.pod_ip for pod in pods}
    assert len(addresses) == 3  # three pods, three network namespaces


def write_dataset(path: Path, rows: int, seed: int) -> None:
    """Two classes split by a fixed hyperplane through 8 features, as a prepare step would write it."""
    generator = random.Random(seed)
    weights = [generator.uniform(-1, 1) for _ in range(8)]
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow([f"f{i}" for i in range(8)] + ["label"])
        for _ in range(rows):
            features = [generator.gauss(0, 1) for _ in range(8)]
            writer.writerow(
                [f"{x:.5f}" for x in features] + [int(sum(w * x for w, x in zip(weights, features, strict=True)) > 0)]
            )


EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=([0-9.]+) accuracy=([0-9.]+)$", re.MULTILINE)


def test_train_ddp_learns_across_three_pods_and_a_new_job_resumes_from_its_checkpoint(
    admin_api, jobs, restricted, storage: Path
):
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    write_dataset(storage / "train.csv", rows=1200, seed=7)
    command = ["python", "/workspace/train_ddp.py", "--data", "/data/train.csv", "--output-dir", "/data/model"]
    checkpoints = ["--checkpoint-dir", "/data/checkpoints"]

    run_job(admin_api, jobs, restricted, pytorch_job("ddp", [*command, *checkpoints, "--epochs", "3"], with_data=True))

    log = pod_log(core, restricted, "ddp-master-0")
    assert "world_size=3 backend=gloo launcher=operator" in log
    epochs = [(int(e), float(loss), float(acc)) for e, loss, acc in EPOCH_LINE.findall(log)]
    assert [e for e, _, _ in epochs] == [1, 2, 3]
    assert epochs[-1][1] < epochs[0][1]  # the loss goes down
    metrics = termination_message(core, restricted, "ddp-master-0")
    assert metrics["world_size"] == 3 and metrics["epochs"] == 3 and metrics["accuracy"] > 0.9
    assert json.loads((storage / "model" / "metrics.json").read_text()) == metrics
    assert (storage / "model" / "model.pt").stat().st_size > 0
    assert len(json.loads((storage / "model" / "model.json").read_text())["layers"]) == 2
    assert (storage / "checkpoints" / "checkpoint.pt").exists()
    # Only rank 0 prints epochs; the workers trained too (their processes joined the group).
    assert "epoch=" not in pod_log(core, restricted, "ddp-worker-1")

    run_job(
        admin_api, jobs, restricted, pytorch_job("ddp-more", [*command, *checkpoints, "--epochs", "5"], with_data=True)
    )

    resumed = pod_log(core, restricted, "ddp-more-master-0")
    assert "resumed from epoch 3 (saved by a world of 3)" in resumed
    assert [int(e) for e, _, _ in EPOCH_LINE.findall(resumed)] == [4, 5]
    assert termination_message(core, restricted, "ddp-more-master-0")["epochs"] == 5


def test_a_worker_killed_mid_training_is_restarted_and_the_training_resumes_from_the_checkpoint(
    admin_api, jobs, restricted, storage: Path
):
    """restartPolicy OnFailure: the node restarts the killed container, the other ranks' collectives fail
    and they restart too; the new process group resumes from the epoch rank 0 checkpointed last."""
    import os
    import signal
    import time

    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    command = ["python", "/workspace/train_ddp.py", "--epochs", "40", "--output-dir", "/data/model"]
    client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        "kubeflow.org", "v1", restricted, "pytorchjobs", pytorch_job("faulty", command, with_data=True)
    )
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            if len(EPOCH_LINE.findall(pod_log(core, restricted, "faulty-master-0"))) >= 3:
                break
        except client.exceptions.ApiException:
            pass  # not created or not started yet
        time.sleep(0.3)
    worker = core.read_namespaced_pod("faulty-worker-1", restricted).status.container_statuses[0]
    os.kill(int(worker.container_id.removeprefix("noderunner://")), signal.SIGKILL)
    # The node reports the kill (the restarted process may fail again a moment later, when the other ranks'
    # collectives fail and they restart: its lastState then says exit code 1).
    killed = wait_for_pod(
        core,
        restricted,
        "faulty-worker-1",
        lambda pod: pod.status.container_statuses[0].restart_count > worker.restart_count,
        60,
        "the killed worker to be restarted",
    )
    assert killed.status.container_statuses[0].last_state.terminated.exit_code == 137

    def succeeded() -> bool:
        found = jobs.get("pytorchjobs", restricted, "faulty") or {}
        return any(
            c["type"] == "Succeeded" and c["status"] == "True"
            for c in (found.get("status") or {}).get("conditions") or []
        )

    jobs.wait_for(succeeded, TIMEOUT, "the job to succeed after the restart")
    restarted = core.read_namespaced_pod("faulty-worker-1", restricted).status.container_statuses[0]
    assert restarted.restart_count >= 1
    log = pod_log(core, restricted, "faulty-master-0")
    resumed = re.search(r"resumed from epoch (\d+)", log)
    assert resumed, log
    epochs = [int(e) for e, _, _ in EPOCH_LINE.findall(log)]
    assert epochs == list(range(int(resumed.group(1)) + 1, 41))
    assert int(resumed.group(1)) >= 3


DELETED_THEN_RETRIED_DAG = """
import datetime

import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import PodOptions, RunPolicy, WaitPolicy


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    PyTorchJobOperator(
        task_id="train",
        job_manifest={manifest!r},  # the pods' security context, for the PodSecurity "restricted" profile
        image="disttrain-pytorch:local",
        command=["python", "/workspace/train_ddp.py"],
        # The task instance's own checkpoint directory, the same for every try (training/README.md).
        # Epochs of at least 1 s: the job still trains while its deletion after epoch 3 reaches the pods.
        args=["--epochs", "15", "--min-epoch-seconds", "1", "--output-dir", "/data/model",
              "--checkpoint-dir", "/data/checkpoints/{{{{ dag.dag_id }}}}/{{{{ run_id }}}}/{{{{ ti.task_id }}}}"],
        num_workers=1,
        run_policy=RunPolicy(clean_pod_policy="None"),
        pod_options=PodOptions(volumes=[{claim!r}], volume_mounts=[{{"name": "data", "mountPath": "/data"}}]),
        wait_policy=WaitPolicy(poll_interval=1),
        retries=1,
        retry_delay=datetime.timedelta(0),
    )


pipeline()
"""


def test_a_job_deleted_mid_training_is_resubmitted_by_the_retry_and_resumes_from_the_checkpoint(
    admin_api, jobs, restricted, run_dag, storage: Path, capfd
):
    """Someone deletes the running PyTorchJob: the try fails saying so, the retry submits a new job with
    the same per-task-instance checkpoint directory, and training goes on from the last saved epoch."""
    import threading
    import time

    from kubernetes import client

    from tests.integration.conftest import unique_dag_id

    core = client.CoreV1Api(admin_api)
    deleted: dict[str, str] = {}

    def delete_after_three_epochs() -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for job in jobs.list("pytorchjobs", restricted):
                name = job["metadata"]["name"]
                try:
                    log = pod_log(core, restricted, f"{name}-master-0")
                except client.exceptions.ApiException:
                    continue  # not created or not started yet
                if len(EPOCH_LINE.findall(log)) >= 3:
                    jobs.custom.delete_namespaced_custom_object(
                        "kubeflow.org", "v1", restricted, "pytorchjobs", name, propagation_policy="Background"
                    )
                    deleted.update(name=name, log=log)
                    return
            time.sleep(0.3)

    deleter = threading.Thread(target=delete_after_three_epochs, daemon=True)
    deleter.start()
    dag_id = unique_dag_id("deleted")
    source = DELETED_THEN_RETRIED_DAG.format(dag_id=dag_id, manifest=restricted_manifest(), claim=CLAIM)
    result = run_dag(dag_id, source)
    deleter.join(timeout=5)

    assert deleted, "the job was never seen training"
    output = "".join(capfd.readouterr())
    assert f"PyTorchJob {restricted}/{deleted['name']} no longer exists: it was deleted outside this task" in output
    assert result.task_state("train") == "success", result.task_states
    [ti] = [ti for ti in result.dag_run.get_task_instances() if ti.task_id == "train"]
    assert ti.try_number == 2
    [retried] = jobs.list("pytorchjobs", restricted)
    assert retried["metadata"]["name"] != deleted["name"]
    log = pod_log(core, restricted, f"{retried['metadata']['name']}-master-0")
    resumed = re.search(r"resumed from epoch (\d+)", log)
    assert resumed, log
    # The checkpoint the first job saved last: at least the epochs it was seen finishing.
    first_epochs = [int(e) for e, _, _ in EPOCH_LINE.findall(deleted["log"])]
    assert first_epochs[:3] == [1, 2, 3]
    assert 3 <= int(resumed.group(1)) < 15
    assert [int(e) for e, _, _ in EPOCH_LINE.findall(log)] == list(range(int(resumed.group(1)) + 1, 16))
