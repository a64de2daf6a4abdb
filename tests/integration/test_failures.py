"""Failures a user must understand from the task log alone: a replica's Python process raising (a real
traceback, a real exit code 1) or killed for exceeding its memory limit (OOMKilled, by the memory cgroup),
both on the executing node where the replicas' processes run; and a job that can never be scheduled
(more GPUs than the cluster has)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.parameters import WaitPolicy
from tests.integration.conftest import NO_GPU_NODE, training_dag, unique_dag_id

# Trains for real on the executing node (CPU-bound): one such test at a time, on one xdist worker.
pytestmark = pytest.mark.xdist_group("executing")


def _dag(dag_id: str, job_name: str, deferrable: bool, **extra: object) -> str:
    arguments = {"wait_policy": WaitPolicy(poll_interval=1, startup_timeout=120), "log_replicas": "all", **extra}
    return training_dag(dag_id, job_name=job_name, restart_policy="Never", deferrable=deferrable, **arguments)


RAISES = """
print("epoch=1 loss=0.6931", flush=True)
raise ValueError("loss is nan at step 7")
"""
# Written page by page: the memory cgroup of the 64 MiB limit kills the process part way.
HOGS = "blocks = [bytearray(16 * 2**20) for _ in range(64)]"


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
@pytest.mark.parametrize(
    ("script", "resources", "expected", "last_line"),
    [
        (RAISES, None, "Error, exit code 1", "ValueError: loss is nan at step 7"),
        (HOGS, {"limits": {"memory": "64Mi"}}, "OOMKilled, exit code 137", None),
    ],
    ids=["traceback-exit-1", "oomkilled"],
)
def test_failed_replica_fails_the_task_with_the_reason(
    executing: str,
    run_dag: Any,
    capfd: pytest.CaptureFixture[str],
    deferrable: bool,
    script: str,
    resources: dict[str, Any] | None,
    expected: str,
    last_line: str | None,
) -> None:
    dag_id = unique_dag_id("fail")
    job_name = f"fail-{dag_id[-6:]}"
    extra: dict[str, Any] = {"replica_resources": resources} if resources else {}
    source = _dag(dag_id, job_name, deferrable, command=["python", "-u", "-c", script], **extra)
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "failed"
    log = capfd.readouterr()
    output = log.out + log.err
    assert "JobFailedError" in output
    assert f"PyTorchJob {executing}/{job_name} failed" in output
    # The Failed condition's reason, and the replica with what Kubernetes said about its container.
    assert "Failed condition: PyTorchJobFailed" in output
    assert f"master-0 ({job_name}-master-0): Failed - container pytorch: {expected}" in output
    if last_line is not None:
        # The process's own output, copied from the Master's log into the task log: the whole traceback.
        master = f"{job_name}-master-0"
        assert f"[{master}] epoch=1 loss=0.6931" in output
        assert f"[{master}] Traceback (most recent call last):" in output
        assert f'[{master}]   File "<string>", line 3, in <module>' in output
        assert f"[{master}] {last_line}" in output


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
def test_unschedulable_job_times_out_with_the_schedulers_message_and_is_deleted(
    namespace, run_dag, capfd, jobs, deferrable
):
    dag_id = unique_dag_id("nogpu")
    job_name = f"nogpu-{dag_id[-6:]}"
    source = _dag(dag_id, job_name, deferrable, gpus_per_replica=64, wait_policy=WaitPolicy(startup_timeout=8))
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "failed"
    output = "".join(capfd.readouterr())
    assert "JobTimeoutError" in output
    assert "did not start within startup_timeout" in output
    assert NO_GPU_NODE.search(output), output[-4000:]
    assert "was deleted (cleanup_policy.on_timeout=True)" in output
    jobs.wait_for(lambda: jobs.get("pytorchjobs", namespace, job_name) is None, timeout=30, what="job deletion")
    jobs.wait_for(lambda: not jobs.pods(namespace, job_name), timeout=60, what="pod garbage collection")
