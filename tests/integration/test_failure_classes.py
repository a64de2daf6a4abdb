"""Whose failure was it, end to end through the public operator and ``DisttrainRetryPolicy`` (Airflow 3.3):
a training script that raises on the executing node fails the task at once with the training class,
retries left unused; a job that never gets room to run hits its startup deadline, is classed the
infrastructure's, and is retried by the policy until the task's retries are spent; so is a job whose
pod is evicted (simulated on a kwok node)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import unique_dag_id

# The training-class tests train for real on the executing node (CPU-bound): they join the
# executing-node tests' xdist_group, one such test at a time. The infrastructure-class ones run on kwok.

POLICY_DAG = """
import datetime

import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy
from airflow_provider_disttrain.failures.retry_policy import DisttrainRetryPolicy


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    PyTorchJobOperator(
        task_id="train",
        image="busybox:1.36",
        command={command!r},
        num_workers=1,
        restart_policy="Never",
        gpus_per_replica={gpus!r},
        deferrable={deferrable!r},
        annotations={annotations!r},
        wait_policy=WaitPolicy(poll_interval=1, startup_timeout={startup_timeout!r}),
        retries=2,
        retry_delay=datetime.timedelta(hours=1),  # the policy's delay, not this, must apply to a retry
        retry_policy=DisttrainRetryPolicy(infrastructure_delay=datetime.timedelta(seconds=1)),
    )


pipeline()
"""

RAISES = """
print("epoch=1 loss=0.6931", flush=True)
raise ValueError("loss is nan at step 7")
"""


def _run(run_dag: Any, prefix: str, annotations: dict[str, str] | None = None, **arguments: Any) -> Any:
    dag_id = unique_dag_id(prefix)
    return run_dag(dag_id, POLICY_DAG.format(dag_id=dag_id, annotations=annotations or {}, **arguments))


def _tries(result: Any) -> int:
    (ti,) = [ti for ti in result.dag_run.get_task_instances() if ti.task_id == "train"]
    return int(ti.try_number)


@pytest.mark.xdist_group("executing")
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_training_script_that_raises_fails_the_task_at_once_with_the_training_class(
    executing: str, run_dag: Any, jobs: Any, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    command = ["python", "-u", "-c", RAISES]
    # No startup deadline: under load (a scale benchmark on the cluster) the operator may take minutes to
    # create the pods, and a deadline would be the infrastructure's failure, rightly retried.
    result = _run(run_dag, "trainfail", command=command, gpus=0, deferrable=deferrable, startup_timeout=None)

    assert result.task_state("train") == "failed"
    assert _tries(result) == 1, "the policy must not spend the task's 2 retries on the training's own failure"
    assert len(jobs.list("pytorchjobs", executing)) == 1  # one job: no retry submitted another
    failure = result.xcom("train", key="failure")
    assert failure["class"] == "training"
    assert failure["reason"] == "Error"
    assert "master-0: container pytorch Error, exit code 1" in failure["evidence"]
    assert any(line.endswith("ValueError: loss is nan at step 7") for line in failure["evidence"])
    output = "".join(capfd.readouterr())
    assert "JobFailedInTrainingError" in output
    assert (
        "Failure class: training (Error), the training's own failure: a retry of the same job would fail the same way"
    ) in output


def assert_retried_as_infrastructure(result: Any, output: str, reason: str, evidence: str, error: str) -> None:
    """Every try failed with ``error``, classed the infrastructure's for ``reason``; the policy retried it
    (after its 1 s, not the task's retry_delay of an hour) until the task's 2 retries were spent."""
    assert result.task_state("train") == "failed"
    assert _tries(result) == 3
    failure = result.xcom("train", key="failure")
    assert (failure["class"], failure["reason"]) == ("infrastructure", reason)
    assert evidence in failure["evidence"]
    assert output.count(error) >= 3
    assert f"Failure class: infrastructure ({reason}), the infrastructure's failure: a retry may succeed" in output


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_job_that_never_gets_room_is_the_infrastructures_failure_and_is_retried(
    namespace: str, run_dag: Any, jobs: Any, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    # 64 GPUs in one pod (the most the provider accepts): no node has them, the scheduler leaves the pods
    # Pending until the deadline.
    command = ["python", "train.py"]
    result = _run(run_dag, "infrafail", command=command, gpus=64, deferrable=deferrable, startup_timeout=5)

    output = "".join(capfd.readouterr())
    assert_retried_as_infrastructure(
        result, output, "timeout", "the wait ended: timeout", "JobTimeoutOnInfrastructureError"
    )
    assert jobs.list("pytorchjobs", namespace) == []  # each try's job was deleted at its deadline


def test_an_evicted_replica_is_the_infrastructures_failure_and_is_retried(
    namespace: str, run_dag: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    # kwok ends the pods as evicted (dev/cluster/README.md, "Simulated pods"): the job fails, not times out.
    # No startup deadline: while other jobs fill the kwok nodes' pod slots, the pods wait their turn.
    evicted = {"disttrain.test/reason": "Evicted", "disttrain.test/exit-code": "137", "disttrain.test/run-seconds": "1"}
    command = ["python", "train.py"]
    result = _run(run_dag, "evicted", evicted, command=command, gpus=0, deferrable=False, startup_timeout=None)

    output = "".join(capfd.readouterr())
    evidence = "master-0: container pytorch Evicted, exit code 137"
    assert_retried_as_infrastructure(result, output, "Evicted", evidence, "JobFailedOnInfrastructureError")
