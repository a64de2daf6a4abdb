"""Never waiting for the impossible, on the real Kueue (v0.19.2, ``UnadmittedWorkloadsObservability`` on):
a job Kueue can never admit fails at once, in Kueue's words, through the public operators, sync and
deferrable, far sooner than its ``queue_timeout``, and nothing of it is left.

- A job asking more than its ClusterQueue holds: Kueue's Workload says ``ExceedsMaxQuota``; the task
  fails with ``JobInadmissibleError`` and Kueue's message, and the job is deleted.
- A LocalQueue that does not exist, a ClusterQueue that is stopped: the LocalQueue check before
  submitting refuses the job; nothing is created.
- A LocalQueue stopped while the job waits in it: the Workload says ``Suspended``; the same ending.

Each test has a ClusterQueue of its own (8 nvidia.com/gpu, the namespace's only) on a kwok node of its
own (conftest's ``small_queue``), so neither its quota, its stop nor its jobs' pods touch other tests: they
run beside them on any xdist worker.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from airflow_provider_disttrain.parameters import WaitPolicy
from tests.integration.conftest import SMALL_QUEUE, kueue_condition, training_dag, unique_dag_id, wait_until

QUEUE_TIMEOUT = 1800  # what the tasks would wait without Kueue's final word
DEFERRABLE = pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])


def _run(run_dag: Any, capfd: Any, dag_id: str, **operator_args: Any) -> tuple[Any, str, float]:
    start = time.monotonic()
    result = run_dag(dag_id, training_dag(dag_id, **operator_args))
    seconds, output = time.monotonic() - start, "".join(capfd.readouterr())
    print(f"{dag_id}: the task ended after {seconds:.0f} s")  # a figure for the reader: benchmarks time
    return result, output, seconds


@DEFERRABLE
def test_a_job_over_its_cluster_queues_quota_fails_at_once_in_kueues_words_and_is_deleted(
    namespace, run_dag, jobs, small_queue, capfd, deferrable
):
    dag_id = unique_dag_id("kueue_exceeds")
    job_name = f"too-big-{dag_id[-6:]}"
    # A Master and a Worker of 8 GPUs each: 16, on a ClusterQueue of 8.
    result, output, seconds = _run(
        run_dag,
        capfd,
        dag_id,
        job_name=job_name,
        gpus_per_replica=8,
        local_queue=SMALL_QUEUE,
        deferrable=deferrable,
        wait_policy=WaitPolicy(poll_interval=1, queue_timeout=QUEUE_TIMEOUT),
    )

    assert result.task_state("train") == "failed"
    assert seconds < QUEUE_TIMEOUT, f"took {seconds:.0f} s"  # Kueue's word, not the queue_timeout, ended it
    assert "JobInadmissibleError" in output
    assert f"PyTorchJob {namespace}/{job_name} was not admitted: Kueue can never admit it (ExceedsMaxQuota: " in output
    # Kueue's own words (pkg/scheduler/flavorassigner, fitsResourceQuota).
    assert f"insufficient quota for nvidia.com/gpu in flavor {small_queue.flavor}" in output
    assert "> maximum capacity (8)" in output
    assert f"PyTorchJob {namespace}/{job_name} was deleted: Kueue can never admit it as its queues stand." in output
    assert "was not admitted by Kueue within queue_timeout" not in output
    jobs.wait_for(lambda: jobs.get("pytorchjobs", namespace, job_name) is None, timeout=30, what="job deletion")
    jobs.wait_for(lambda: not small_queue.workloads(), timeout=30, what="its Workload's deletion")


@DEFERRABLE
def test_a_job_for_a_local_queue_that_does_not_exist_fails_before_anything_is_created(
    namespace, run_dag, jobs, capfd, deferrable
):
    dag_id = unique_dag_id("kueue_no_queue")
    result, output, seconds = _run(
        run_dag,
        capfd,
        dag_id,
        gpus_per_replica=1,
        local_queue="no-such-queue",
        deferrable=deferrable,
        wait_policy=WaitPolicy(poll_interval=1, queue_timeout=QUEUE_TIMEOUT),
    )

    assert result.task_state("train") == "failed"
    assert seconds < QUEUE_TIMEOUT, f"took {seconds:.0f} s"  # Kueue's word, not the queue_timeout, ended it
    assert "JobInadmissibleError" in output
    assert "was not submitted: Kueue could never admit it (LocalQueue no-such-queue doesn't exist" in output
    assert f"doesn't exist in namespace {namespace})" in output
    assert jobs.list("pytorchjobs", namespace) == []


@DEFERRABLE
def test_a_job_for_a_stopped_cluster_queue_fails_before_anything_is_created(
    namespace, run_dag, jobs, small_queue, capfd, deferrable
):
    small_queue.stop()
    dag_id = unique_dag_id("kueue_stopped")
    result, output, seconds = _run(
        run_dag,
        capfd,
        dag_id,
        gpus_per_replica=1,
        local_queue=SMALL_QUEUE,
        deferrable=deferrable,
        wait_policy=WaitPolicy(poll_interval=1, queue_timeout=QUEUE_TIMEOUT),
    )

    assert result.task_state("train") == "failed"
    assert seconds < QUEUE_TIMEOUT, f"took {seconds:.0f} s"  # Kueue's word, not the queue_timeout, ended it
    assert "JobInadmissibleError" in output
    # Read from the ClusterQueue itself (the service account's ClusterRole may read it).
    assert (
        f"Kueue could never admit it (LocalQueue {SMALL_QUEUE} points to ClusterQueue {small_queue.cluster_queue} "
        "is stopped (spec.stopPolicy Hold))"
    ) in output
    assert jobs.list("pytorchjobs", namespace) == []


@DEFERRABLE
def test_a_local_queue_stopped_while_the_job_waits_ends_the_wait_in_kueues_words(
    namespace, run_dag, jobs, small_queue, capfd, deferrable
):
    # Another user's job holds the ClusterQueue's 8 GPUs; the task's job waits for quota; then an
    # administrator stops the LocalQueue (Hold: the running job keeps running, nothing new is admitted).
    # (A ClusterQueue stopped meanwhile is not always said on a pending Workload by Kueue v0.19.2: its
    # Workload reconciler reads the ClusterQueue's state from a cache the ClusterQueue's own controller
    # may not have updated yet, and keeps the scheduler's WaitingForQuota.)
    small_queue.submit_blocker("holds-the-gpus", gpus=8, run_seconds=90)
    wait_until(
        "the blocker admitted",
        lambda: any(kueue_condition(w, "Admitted").get("status") == "True" for w in small_queue.workloads()),
    )
    dag_id = unique_dag_id("kueue_stopped_later")
    job_name = f"waits-{dag_id[-6:]}"

    def stop_once_waiting() -> None:
        wait_until(
            "the task's job waiting for quota",
            lambda: any(
                kueue_condition(w, "QuotaReserved").get("reason") == "WaitingForQuota"
                and w["metadata"]["ownerReferences"][0]["name"] == job_name
                for w in small_queue.workloads()
            ),
            timeout=90,
        )
        small_queue.stop_local_queue()

    threading.Thread(target=stop_once_waiting, daemon=True).start()
    result, output, seconds = _run(
        run_dag,
        capfd,
        dag_id,
        job_name=job_name,
        gpus_per_replica=4,
        local_queue=SMALL_QUEUE,
        deferrable=deferrable,
        wait_policy=WaitPolicy(poll_interval=1, queue_timeout=QUEUE_TIMEOUT),
    )

    assert result.task_state("train") == "failed"
    assert seconds < QUEUE_TIMEOUT, f"took {seconds:.0f} s"  # Kueue's word, not the queue_timeout, ended it
    assert "JobInadmissibleError" in output
    assert (
        "Kueue can never admit it (Suspended: its LocalQueue or ClusterQueue is stopped or inactive): "
        f"LocalQueue {SMALL_QUEUE} is inactive"
    ) in output
    jobs.wait_for(lambda: jobs.get("pytorchjobs", namespace, job_name) is None, timeout=30, what="job deletion")
    assert jobs.get("pytorchjobs", namespace, "holds-the-gpus") is not None  # the running job is not ours
