"""Real PyTorch DDP on the executing node: PyTorchJobs (Master + 2 Workers) that the real training-operator
turns into pods, whose processes form a gloo process group from exactly the environment the operator
injected (MASTER_ADDR = the Master's Service name, resolved by the node to the Master pod's address).
"""

from __future__ import annotations

import csv
import json
import random
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.integration.executing_node import steer_to_executing_node

TIMEOUT = 240


@pytest.fixture
def executing(admin_api: Any, namespace: str) -> str:
    from kubernetes import client

    steer_to_executing_node(client.CoreV1Api(admin_api), namespace)
    return namespace


def pytorch_job(name: str, command: list[str], volume_dir: Path | None = None, workers: int = 2) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "pytorch", "image": "disttrain-pytorch:local", "command": command}
    pod_spec: dict[str, Any] = {"containers": [container]}
    if volume_dir is not None:
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
        pod_spec["volumes"] = [{"name": "data", "hostPath": {"path": str(volume_dir), "type": "Directory"}}]
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


def test_the_ranks_of_a_pytorchjob_all_reduce_over_gloo(admin_api, jobs, executing):
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    run_job(admin_api, jobs, executing, pytorch_job("allreduce", ["python", "-c", ALL_REDUCE]))

    assert termination_message(core, executing, "allreduce-master-0") == {"sum": 3.0, "world_size": 3}
    pods = {"allreduce-master-0": 0, "allreduce-worker-0": 1, "allreduce-worker-1": 2}
    for pod, rank in pods.items():
        assert f"rank {rank} of 3 on {pod} via allreduce-master-0: sum 3" in pod_log(core, executing, pod)
    addresses = {core.read_namespaced_pod(pod, executing).status.pod_ip for pod in pods}
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
    admin_api, jobs, executing, tmp_path: Path
):
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    tmp_path.chmod(0o777)
    write_dataset(tmp_path / "train.csv", rows=1200, seed=7)
    command = ["python", "/workspace/train_ddp.py", "--data", "/data/train.csv", "--output-dir", "/data/model"]
    checkpoints = ["--checkpoint-dir", "/data/checkpoints"]

    run_job(admin_api, jobs, executing, pytorch_job("ddp", [*command, *checkpoints, "--epochs", "3"], tmp_path))

    log = pod_log(core, executing, "ddp-master-0")
    assert "world_size=3 backend=gloo launcher=operator" in log
    epochs = [(int(e), float(loss), float(acc)) for e, loss, acc in EPOCH_LINE.findall(log)]
    assert [e for e, _, _ in epochs] == [1, 2, 3]
    assert epochs[-1][1] < epochs[0][1]  # the loss goes down
    metrics = termination_message(core, executing, "ddp-master-0")
    assert metrics["world_size"] == 3 and metrics["epochs"] == 3 and metrics["accuracy"] > 0.9
    assert json.loads((tmp_path / "model" / "metrics.json").read_text()) == metrics
    assert (tmp_path / "model" / "model.pt").stat().st_size > 0
    assert len(json.loads((tmp_path / "model" / "model.json").read_text())["layers"]) == 2
    assert (tmp_path / "checkpoints" / "checkpoint.pt").exists()
    # Only rank 0 prints epochs; the workers trained too (their processes joined the group).
    assert "epoch=" not in pod_log(core, executing, "ddp-worker-1")

    run_job(admin_api, jobs, executing, pytorch_job("ddp-more", [*command, *checkpoints, "--epochs", "5"], tmp_path))

    resumed = pod_log(core, executing, "ddp-more-master-0")
    assert "resumed from epoch 3 (saved by a world of 3)" in resumed
    assert [int(e) for e, _, _ in EPOCH_LINE.findall(resumed)] == [4, 5]
    assert termination_message(core, executing, "ddp-more-master-0")["epochs"] == 5


def test_a_worker_killed_mid_training_is_restarted_and_the_training_resumes_from_the_checkpoint(
    admin_api, jobs, executing, tmp_path: Path
):
    """restartPolicy OnFailure: the node restarts the killed container, the other ranks' collectives fail
    and they restart too; the new process group resumes from the epoch rank 0 checkpointed last."""
    import os
    import signal
    import time

    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    tmp_path.chmod(0o777)
    command = ["python", "/workspace/train_ddp.py", "--epochs", "40", "--output-dir", "/data/model"]
    client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        "kubeflow.org", "v1", executing, "pytorchjobs", pytorch_job("faulty", command, tmp_path)
    )
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            if len(EPOCH_LINE.findall(pod_log(core, executing, "faulty-master-0"))) >= 3:
                break
        except client.exceptions.ApiException:
            pass  # not created or not started yet
        time.sleep(0.3)
    worker = core.read_namespaced_pod("faulty-worker-1", executing).status.container_statuses[0]
    os.kill(int(worker.container_id.removeprefix("noderunner://")), signal.SIGKILL)

    def succeeded() -> bool:
        found = jobs.get("pytorchjobs", executing, "faulty") or {}
        return any(
            c["type"] == "Succeeded" and c["status"] == "True"
            for c in (found.get("status") or {}).get("conditions") or []
        )

    jobs.wait_for(succeeded, TIMEOUT, "the job to succeed after the restart")
    restarted = core.read_namespaced_pod("faulty-worker-1", executing).status.container_statuses[0]
    assert restarted.restart_count >= 1
    assert restarted.last_state.terminated.exit_code == 137
    log = pod_log(core, executing, "faulty-master-0")
    resumed = re.search(r"resumed from epoch (\d+)", log)
    assert resumed, log
    epochs = [int(e) for e, _, _ in EPOCH_LINE.findall(log)]
    assert epochs == list(range(int(resumed.group(1)) + 1, 41))
    assert int(resumed.group(1)) >= 3
