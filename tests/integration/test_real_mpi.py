"""Real MPI on the executing node: an MPIJob whose launcher runs Open MPI's ``mpirun`` over the hostfile
and SSH keys the real mpi-operator generated, into two workers running a real ``sshd``; the ranks
train data-parallel with ``MPI.Allreduce`` (training/mpi/train_mpi.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

# Trains for real on the executing node (CPU-bound): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("executing")

EPOCH_LINE = re.compile(r"^epoch=(\d+) loss=([0-9.]+) accuracy=([0-9.]+)$", re.MULTILINE)


def mpi_job(name: str, launcher_command: list[str]) -> dict[str, Any]:
    def replica(count: int, container: str, command: list[str]) -> dict[str, Any]:
        spec = {"containers": [{"name": container, "image": "disttrain-mpi:local", "command": command}]}
        return {"replicas": count, "template": {"spec": spec}}

    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name},
        "spec": {
            "slotsPerWorker": 1,
            "mpiImplementation": "OpenMPI",
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"cleanPodPolicy": "Running"},
            "mpiReplicaSpecs": {
                "Launcher": replica(1, "launcher", launcher_command),
                "Worker": replica(2, "worker", ["/usr/sbin/sshd", "-De"]),
            },
        },
    }


def test_mpirun_over_the_operators_hostfile_and_ssh_keys_trains_across_two_workers(admin_api, jobs, executing):
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    command = [
        "mpirun",
        "--allow-run-as-root",
        "-x",
        "PATH",
        "-np",
        "2",
        "python3",
        "/workspace/train_mpi.py",
        "--epochs",
        "15",
    ]
    client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        "kubeflow.org", "v2beta1", executing, "mpijobs", mpi_job("mpi", command)
    )

    def conditions() -> dict[str, str]:
        found = jobs.get("mpijobs", executing, "mpi", version="v2beta1") or {}
        return {c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions") or []}

    jobs.wait_for(lambda: "True" in (conditions().get("Succeeded"), conditions().get("Failed")), 180, "the MPIJob")
    launchers = core.list_namespaced_pod(executing, label_selector="training.kubeflow.org/job-role=launcher").items
    log = core.read_namespaced_pod_log(launchers[0].metadata.name, executing, _preload_content=False).data.decode()
    assert conditions().get("Succeeded") == "True", (conditions(), log)

    # The ranks ran in the worker pods (their hostnames), reached through the hostfile's names.
    hostfile = core.read_namespaced_config_map("mpi-config", executing).data["hostfile"]
    assert hostfile.split() == [
        f"mpi-worker-0.mpi.{executing}.svc",
        "slots=1",
        f"mpi-worker-1.mpi.{executing}.svc",
        "slots=1",
    ]
    assert "rank 0 of 2 on mpi-worker-0: ranks all-reduced to 1" in log
    assert "rank 1 of 2 on mpi-worker-1: ranks all-reduced to 1" in log
    epochs = [(int(e), float(loss), float(acc)) for e, loss, acc in EPOCH_LINE.findall(log)]
    assert [e for e, _, _ in epochs] == list(range(1, 16))
    assert epochs[-1][1] < epochs[0][1]
    metrics = json.loads(log.split("metrics=", 1)[1].splitlines()[0])
    assert metrics["world_size"] == 2 and metrics["accuracy"] > 0.9
