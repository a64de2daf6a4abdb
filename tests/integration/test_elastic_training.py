"""Elastic training for real, on the executing node: an elastic PyTorchJob (``elasticPolicy``, no Master)
whose pods run ``torchrun`` with the c10d rendezvous the training-operator points them at
(``PET_RDZV_ENDPOINT=<job>-worker-0:23456``, ``PET_NNODES=2:3``), scaled by ``ScaleTrainingJobOperator``
from 2 to 3 workers and back to 2 while it trains. Each time the torchrun agents re-form the group, and
``train_ddp.py`` goes on from the checkpoint rank 0 wrote last, at the new world size.

What makes the pods find each other: the operator creates a headless Service per replica
(``<job>-worker-<i>``, the rendezvous endpoint's host among them); the executing node resolves Service
names to the addresses of the pods they select (dev/cluster/noderunner/hosts.py).
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import unique_dag_id, wait_until
from tests.integration.executing_node import steer_to_executing_node

# Trains for real on the executing node (CPU-bound): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("executing")

TIMEOUT = 180  # a ceiling for a busy machine; on an idle one each wait takes seconds
JOB = "elastic"
EPOCHS = 70

# Rank 0's lines (train_ddp.py): one when a process group is formed, one when it resumed, one per epoch.
STARTED = re.compile(r"^world_size=(\d+) backend=gloo launcher=torchrun", re.MULTILINE)
RESUMED = re.compile(r"^resumed from epoch (\d+) \(saved by a world of (\d+)\)$", re.MULTILINE)
EPOCH = re.compile(r"^epoch=(\d+) loss=[0-9.]+ accuracy=[0-9.]+ world_size=(\d+)$", re.MULTILINE)
EVENT = re.compile(f"{STARTED.pattern}|{RESUMED.pattern}|{EPOCH.pattern}", re.MULTILINE)

# The job as a user submits it with the provider; the test only adds where its files go (a hostPath volume).
SUBMIT_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import PodOptions, PyTorchOptions, RunPolicy

@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def submit():
    PyTorchJobOperator(
        task_id="train",
        job_name={job_name!r},
        image="disttrain-pytorch:local",
        # torchrun reads its settings from the PET_* variables the training-operator injects.
        command=["torchrun", "/workspace/train_ddp.py"],
        args={args!r},
        num_workers=2,
        # One training process per pod: without it the training-operator sets "auto", and torchrun then
        # starts one per CPU where there is no GPU (two per pod on this machine).
        pytorch_options=PyTorchOptions(nproc_per_node=1, elastic_policy={elastic_policy!r}),
        env={env!r},
        restart_policy="OnFailure",
        run_policy=RunPolicy(clean_pod_policy="None"),
        pod_options=PodOptions(
            volumes=[{{"name": "data", "hostPath": {{"path": {volume_dir!r}, "type": "Directory"}}}}],
            volume_mounts=[{{"name": "data", "mountPath": "/data"}}],
        ),
        wait_for_completion=False,
    )

submit()
"""

SCALE_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.manage import ScaleTrainingJobOperator

@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def scale():
    ScaleTrainingJobOperator(task_id="scale", job_name={job_name!r}, replicas={replicas})

scale()
"""

WAIT_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor

@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def wait():
    TrainingJobSensor(task_id="wait", job_name={job_name!r}, deferrable=False, poke_interval=1, timeout={timeout})

wait()
"""

# A small synthetic dataset (a few steps per epoch), each epoch padded to 0.5 s: the job trains for about
# 35 s, mostly asleep. On a quiet cluster both scalings are done after about 25 epochs; a scale-up that takes
# the cluster more than about 30 s (a training-operator busy with a thousand other jobs) lets the job finish
# first, and the test says so.
TRAINING_ARGS = [
    *("--epochs", str(EPOCHS), "--min-epoch-seconds", "0.5", "--samples", "512"),
    *("--output-dir", "/data/model", "--checkpoint-dir", "/data/checkpoints"),
]
# No TORCH_DISABLE_SHARE_RDZV_TCP_STORE: the provider sets it on an elastic c10d job (checked below). Without
# it torch >= 2.4 hands the workers a store that rank 0's agent creates in the first round only; a node
# joining a later round waits for its address, which nobody publishes again (torch 2.15:
# RendezvousStoreInfo.build under DynamicRendezvousHandler.next_rendezvous), until the store's 60 s
# timeout fails every torchrun.
ENV = {
    # The agents log the rendezvous rounds and the restarts: the failure output when this test fails.
    "LOGLEVEL": "INFO",
}
ELASTIC_POLICY = {
    "min_replicas": 2,
    "max_replicas": 3,
    "rdzv_backend": "c10d",
    # A removed node fails the survivors' collectives: each scale-down is one restart.
    "max_restarts": 3,
    # Short rendezvous waits, so that each re-formed group trains within seconds: a round completes 1 s
    # after the minimum has joined (default 30 s), and a deleted pod's node is dropped after 5 s without a
    # heartbeat (default 15 s).
    "rdzv_conf": [
        {"key": "last_call_timeout", "value": "1"},
        {"key": "keep_alive_interval", "value": "1"},
        {"key": "keep_alive_max_attempt", "value": "5"},
    ],
}


@pytest.fixture
def executing(admin_api: Any, namespace: str) -> str:
    from kubernetes import client

    steer_to_executing_node(client.CoreV1Api(admin_api), namespace)
    return namespace


def run(run_dag: Any, source: str, task_id: str, **fields: Any) -> Any:
    """Runs a one-task DAG (as the service account with the provider's documented Role); its task's result."""
    dag_id = unique_dag_id(f"elastic_{task_id}")
    result = run_dag(dag_id, source.format(dag_id=dag_id, job_name=JOB, **fields))
    assert result.state == "success", result.task_states
    return result.xcom(task_id)


def rank0_log(core: Any, namespace: str) -> str:
    """The log of worker 0, where rank 0 runs in every round: the c10d rendezvous ranks the nodes by their
    address, here the pods' host names, and worker 0's sorts first."""
    from kubernetes.client.exceptions import ApiException

    try:
        return str(core.read_namespaced_pod_log(f"{JOB}-worker-0", namespace, _preload_content=False).data.decode())
    except ApiException:
        return ""  # not created or not started yet


def rounds(log: str) -> list[dict[str, Any]]:
    """The process groups rank 0 trained in, in order: their world size, the epoch they resumed from
    (0 for a fresh start) and the world size that saved it, and their epochs with the size each names."""
    found: list[dict[str, Any]] = []
    for match in EVENT.finditer(log):
        started, resumed, saved_by, epoch, epoch_world = match.groups()
        if started:
            found.append({"world_size": int(started), "resumed": 0, "saved_by": None, "epochs": []})
        elif resumed and found:
            found[-1].update(resumed=int(resumed), saved_by=int(saved_by))
        elif epoch and found:
            found[-1]["epochs"].append((int(epoch), int(epoch_world)))
    return found


def job_finished(jobs: Any, namespace: str) -> bool:
    found = jobs.get("pytorchjobs", namespace, JOB) or {}
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conditions)


def wait_for_round(core: Any, jobs: Any, namespace: str, world_size: int, after: int) -> dict[str, Any]:
    """The first round after the first ``after`` rounds that trained an epoch at ``world_size``."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        over = job_finished(jobs, namespace)  # read before the log: a round in the log then counts
        for trained in rounds(rank0_log(core, namespace))[after:]:
            if trained["world_size"] == world_size and trained["epochs"]:
                return trained
        if over:
            raise AssertionError(
                f"the job trained its {EPOCHS} epochs before a group of {world_size} formed: scaling took the "
                f"cluster longer than the training lasts:\n{rank0_log(core, namespace)}"
            )
        time.sleep(0.5)
    raise AssertionError(f"no epoch at world size {world_size} within {TIMEOUT}s:\n{rank0_log(core, namespace)}")


def test_an_elastic_job_scaled_up_and_down_while_it_trains_resumes_from_its_checkpoint_each_time(
    admin_api, jobs, executing, run_dag, tmp_path: Path
):
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    tmp_path.chmod(0o777)
    submitted = run(
        run_dag,
        SUBMIT_DAG,
        "train",
        args=TRAINING_ARGS,
        elastic_policy=ELASTIC_POLICY,
        env=ENV,
        volume_dir=str(tmp_path),
    )
    assert submitted["name"] == JOB
    live = jobs.get("pytorchjobs", executing, JOB)
    assert "Master" not in live["spec"]["pytorchReplicaSpecs"]  # torchrun's rendezvous takes its place
    [container] = live["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"} in container["env"]  # the provider's

    first = wait_for_round(core, jobs, executing, world_size=2, after=0)
    assert first["resumed"] == 0 and first["epochs"][0] == (1, 2)

    assert run(run_dag, SCALE_DAG, "scale", replicas=3) == {
        "name": JOB,
        "namespace": executing,
        "kind": "PyTorchJob",
        "previous_replicas": 2,
        "replicas": 3,
    }
    seen = len(rounds(rank0_log(core, executing)))
    grown = wait_for_round(core, jobs, executing, world_size=3, after=seen - 1)
    # The group of three goes on from the checkpoint the group of two wrote, not from epoch 0.
    assert grown["resumed"] >= 1 and grown["saved_by"] == 2, grown
    assert grown["epochs"][0] == (grown["resumed"] + 1, 3), grown
    assert {pod.metadata.name for pod in jobs.pods(executing, JOB)} == {f"{JOB}-worker-{i}" for i in range(3)}

    assert run(run_dag, SCALE_DAG, "scale", replicas=2)["previous_replicas"] == 3
    seen = len(rounds(rank0_log(core, executing)))
    shrunk = wait_for_round(core, jobs, executing, world_size=2, after=seen - 1)
    assert shrunk["resumed"] >= grown["epochs"][0][0] and shrunk["saved_by"] == 3, shrunk
    assert shrunk["epochs"][0] == (shrunk["resumed"] + 1, 2), shrunk

    # The provider's sensor sees the elastic job succeed (the training-operator: when a worker succeeded).
    run(run_dag, WAIT_DAG, "wait", timeout=TIMEOUT)
    conditions = {c["type"]: c["status"] for c in jobs.get("pytorchjobs", executing, JOB)["status"]["conditions"]}
    assert conditions.get("Succeeded") == "True", conditions
    # Worker 2's pod went with the scale-down.
    assert {pod.metadata.name for pod in jobs.pods(executing, JOB)} == {f"{JOB}-worker-0", f"{JOB}-worker-1"}

    # The operator calls an elastic job Succeeded when its first worker succeeds; worker 0 may still be
    # writing its last lines and exiting then. Its log is whole, and its exit code known, once it terminated.
    def worker_0_terminated() -> Any:
        [status] = core.read_namespaced_pod(f"{JOB}-worker-0", executing).status.container_statuses
        return status.state.terminated

    terminated = wait_until("worker 0 to exit", worker_0_terminated, timeout=TIMEOUT)
    assert terminated.exit_code == 0, terminated
    trained = rounds(rank0_log(core, executing))
    # Each group went on where the one before it stopped: from the last epoch it reported, or the one after
    # when it was stopped between saving an epoch and reporting it. Nothing started over.
    for before, after in itertools.pairwise(trained):
        last = before["epochs"][-1][0] if before["epochs"] else before["resumed"]
        assert last <= after["resumed"] <= last + 1, trained
        if after["epochs"]:
            assert after["epochs"][0][0] == after["resumed"] + 1, trained
    epochs = [epoch for each in trained for epoch, _ in each["epochs"]]
    assert epochs == sorted(set(epochs)) and epochs[0] == 1 and epochs[-1] == EPOCHS, trained
    assert trained[-1]["world_size"] == 2 and trained[-1]["epochs"][-1] == (EPOCHS, 2)
