"""Failures a user must understand from the task log alone: a replica OOMKilled or exiting with 1, and a
job that can never be scheduled (more GPUs than the cluster has)."""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.parameters import WaitPolicy
from tests.integration.conftest import training_dag, unique_dag_id


def _dag(dag_id: str, job_name: str, deferrable: bool, annotations: dict[str, str], **extra: object) -> str:
    arguments = {"wait_policy": WaitPolicy(poll_interval=1, startup_timeout=120), "log_replicas": "all", **extra}
    return training_dag(
        dag_id, job_name=job_name, restart_policy="Never", annotations=annotations, deferrable=deferrable, **arguments
    )


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"disttrain.test/reason": "OOMKilled"}, "OOMKilled, exit code 137"),
        ({"disttrain.test/exit-code": "1"}, "Error, exit code 1"),
    ],
    ids=["oomkilled", "exit-code-1"],
)
def test_failed_replica_fails_the_task_with_the_reason(namespace, run_dag, capfd, deferrable, annotations, expected):
    dag_id = unique_dag_id("fail")
    job_name = f"fail-{dag_id[-6:]}"
    result = run_dag(dag_id, _dag(dag_id, job_name, deferrable, annotations))

    assert result.task_state("train") == "failed"
    log = capfd.readouterr()
    output = log.out + log.err
    assert "JobFailedError" in output
    assert f"PyTorchJob {namespace}/{job_name} failed" in output
    # The Failed condition's reason, and the replica with what Kubernetes said about its container.
    assert "Failed condition: PyTorchJobFailed" in output
    assert f"master-0 ({job_name}-master-0): Failed - container pytorch: {expected}" in output
    # The pods' logs (kwok serves canned CRI logs) were copied into the task log.
    assert f"[{job_name}-master-0] epoch 1 loss=0.5" in output
    assert f"[{job_name}-worker-0] epoch 1 loss=0.5" in output


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
def test_unschedulable_job_times_out_with_the_schedulers_message_and_is_deleted(
    namespace, run_dag, capfd, jobs, deferrable
):
    dag_id = unique_dag_id("nogpu")
    job_name = f"nogpu-{dag_id[-6:]}"
    source = _dag(dag_id, job_name, deferrable, {}, gpus_per_replica=100, wait_policy=WaitPolicy(startup_timeout=8))
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "failed"
    output = "".join(capfd.readouterr())
    assert "JobTimeoutError" in output
    assert "did not start within startup_timeout" in output
    # Two kwok nodes without enough GPUs, and the executing node (dev/cluster/noderunner), tainted.
    assert (
        "Unschedulable: 0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/gpu"
        in output
    )
    assert "was deleted (cleanup_policy.on_timeout=True)" in output
    jobs.wait_for(lambda: jobs.get("pytorchjobs", namespace, job_name) is None, timeout=30, what="job deletion")
    jobs.wait_for(lambda: not jobs.pods(namespace, job_name), timeout=60, what="pod garbage collection")
