"""The error raised per failure class, and the shipped retry policy's decisions (Airflow 3.3), or the clear
refusal where Airflow has no retry_policy (3.2, the lowest version declared)."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import (
    ClusterAccessError,
    InfrastructureFailureError,
    JobFailedError,
    JobFailedInTrainingError,
    JobFailedOnInfrastructureError,
    JobTimeoutError,
    JobTimeoutInTrainingError,
    JobTimeoutOnInfrastructureError,
    TrainingFailureError,
    classed_error,
)
from airflow_provider_disttrain.failures import retry_policy
from airflow_provider_disttrain.failures.retry_policy import Verdict, decide
from airflow_provider_disttrain.parameters import WaitPolicy
from tests.unit.fakes import OOM_KILLED, FakeTI, FakeTrainingJobHook, make_context, make_event, make_pod, with_hook

HAS_RETRY_POLICY = importlib.util.find_spec("airflow.sdk.definitions.retry_policy") is not None
TRAINING = {"class": "training", "reason": "OOMKilled", "evidence": ["master-0: container pytorch OOMKilled"]}
INFRASTRUCTURE = {"class": "infrastructure", "reason": "Evicted", "evidence": ["worker-0: pod Evicted"]}
UNKNOWN = {"class": "unknown", "reason": "no telling reason", "evidence": []}


@pytest.mark.parametrize(
    ("base", "failure", "raised", "marker"),
    [
        (JobFailedError, TRAINING, JobFailedInTrainingError, TrainingFailureError),
        (JobFailedError, INFRASTRUCTURE, JobFailedOnInfrastructureError, InfrastructureFailureError),
        (JobFailedError, UNKNOWN, JobFailedError, None),
        (JobTimeoutError, TRAINING, JobTimeoutInTrainingError, TrainingFailureError),
        (JobTimeoutError, INFRASTRUCTURE, JobTimeoutOnInfrastructureError, InfrastructureFailureError),
        (JobTimeoutError, UNKNOWN, JobTimeoutError, None),
    ],
)
def test_one_error_per_failure_class_still_caught_as_before(
    base: type, failure: dict[str, Any], raised: type, marker: type | None
) -> None:
    error = classed_error(base, failure, "PyTorchJob ml/train failed")

    assert type(error) is raised
    assert isinstance(error, base)  # code catching JobFailedError / JobTimeoutError keeps working
    assert error.failure == failure
    assert str(error) == "PyTorchJob ml/train failed"
    for other in (TrainingFailureError, InfrastructureFailureError):
        assert isinstance(error, other) == (other is marker)


@pytest.mark.parametrize(
    ("error", "verdict"),
    [
        (
            classed_error(JobFailedError, TRAINING, "m"),
            Verdict("fail", None, "the training's own failure (OOMKilled): not retried"),
        ),
        (
            classed_error(JobTimeoutError, INFRASTRUCTURE, "m"),
            Verdict("retry", timedelta(minutes=2), "the infrastructure's failure (Evicted): retried"),
        ),
        (classed_error(JobFailedError, UNKNOWN, "m"), Verdict("default")),
        (ClusterAccessError("403"), Verdict("default")),
        (ValueError("not ours"), Verdict("default")),
    ],
    ids=["training", "infrastructure", "unknown", "api-error", "foreign"],
)
def test_the_policy_fails_training_retries_infrastructure_and_leaves_the_rest(
    error: BaseException, verdict: Verdict
) -> None:
    assert decide(error, timedelta(minutes=2)) == verdict


def test_the_ready_policy_on_this_airflow() -> None:
    """3.3+: an Airflow RetryPolicy whose decisions are ``decide``'s; 3.2: an ImportError that says why."""
    if not HAS_RETRY_POLICY:
        with pytest.raises(ImportError, match=r"needs Airflow 3\.3 or later.*this is Airflow 3\.2"):
            retry_policy.DisttrainRetryPolicy  # noqa: B018
        return
    from airflow.sdk.definitions.retry_policy import RetryAction, RetryDecision, RetryPolicy

    # max_reschedules=0: an eviction is retried on every version (3.4 reschedules it otherwise, tested below).
    policy = retry_policy.DisttrainRetryPolicy(infrastructure_delay=timedelta(seconds=30), max_reschedules=0)
    assert isinstance(policy, RetryPolicy)
    training = policy.evaluate(classed_error(JobFailedError, TRAINING, "m"), try_number=1, max_tries=3)
    assert training == RetryDecision(RetryAction.FAIL, None, "the training's own failure (OOMKilled): not retried")
    infrastructure = policy.evaluate(classed_error(JobFailedError, INFRASTRUCTURE, "m"), try_number=1, max_tries=3)
    assert infrastructure == RetryDecision(
        RetryAction.RETRY, timedelta(seconds=30), "the infrastructure's failure (Evicted): retried"
    )
    assert policy.evaluate(ValueError("x"), try_number=1, max_tries=3) == RetryDecision(RetryAction.DEFAULT)
    assert type(policy).deserialize(policy.serialize()).infrastructure_delay == timedelta(seconds=30)


def test_an_operator_takes_the_policy_as_retry_policy() -> None:
    """The policy is what DAG authors pass to any operator's ``retry_policy=`` (Airflow 3.3)."""
    from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator

    arguments = {"task_id": "train", "image": "trainer:1", "retries": 3}
    if not HAS_RETRY_POLICY:
        with pytest.raises(TypeError, match="retry_policy"):  # Airflow 3.2's own refusal of the parameter
            PyTorchJobOperator(**arguments, retry_policy=object())
        return
    policy = retry_policy.DisttrainRetryPolicy()
    assert PyTorchJobOperator(**arguments, retry_policy=policy).retry_policy is policy


def running(hook: FakeTrainingJobHook) -> Any:
    from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator

    task = PyTorchJobOperator(
        task_id="train",
        image="trainer:1",
        num_workers=1,
        job_name="train-abc",
        wait_policy=WaitPolicy(poll_interval=0.01),
    )
    return with_hook(task, hook)


def test_a_replica_killed_for_memory_fails_the_task_with_the_training_class() -> None:
    from tests.unit.fakes import failed_status, running_status

    hook = FakeTrainingJobHook(progression=(running_status(), failed_status()))
    terminated = {**OOM_KILLED}
    hook.pods["train-abc"] = [make_pod("train-abc", "master", 0, phase="Failed", terminated=terminated)]
    hook.pods["train-abc"][0]["spec"]["containers"][0]["resources"] = {"limits": {"memory": "64Mi"}}

    with pytest.raises(JobFailedInTrainingError) as raised:
        running(hook).execute(make_context())

    assert raised.value.failure == {
        "class": "training",
        "reason": "OOMKilled",
        "evidence": ["master-0: container pytorch OOMKilled, exit code 137 (memory limit 64Mi)"],
    }
    assert str(raised.value).endswith(
        "Failure class: training (OOMKilled), the training's own failure: "
        "a retry of the same job would fail the same way"
    )
    assert decide(raised.value).action == "fail"


def test_an_evicted_replica_fails_the_task_with_the_infrastructure_class() -> None:
    from tests.unit.fakes import failed_status, running_status

    hook = FakeTrainingJobHook(progression=(running_status(), failed_status()))
    pod = make_pod("train-abc", "master", 0, phase="Failed", terminated={"reason": "Error", "exitCode": 137})
    pod["status"].update(reason="Evicted", message="The node was low on resource: ephemeral-storage.")
    hook.pods["train-abc"] = [pod]
    hook.events.append(make_event("train-abc-master-0", "Evicted", "The node was low on resource: ephemeral-storage."))

    with pytest.raises(JobFailedOnInfrastructureError) as raised:
        running(hook).execute(make_context())

    assert raised.value.failure is not None
    assert raised.value.failure["reason"] == "Evicted"
    assert "Failure class: infrastructure (Evicted), the infrastructure's failure: a retry may succeed" in str(
        raised.value
    )
    assert decide(raised.value).action == "retry"


def test_a_startup_deadline_is_the_infrastructure_class() -> None:
    from tests.unit.fakes import queued_status

    hook = FakeTrainingJobHook(progression=(queued_status(),))
    task = running(hook)
    task.wait_policy = WaitPolicy(poll_interval=0.01, startup_timeout=0.05)

    with pytest.raises(JobTimeoutOnInfrastructureError) as raised:
        task.execute(make_context(FakeTI()))

    assert raised.value.failure == {
        "class": "infrastructure",
        "reason": "timeout",
        "evidence": ["the wait ended: timeout"],
    }


PREEMPTED = {"class": "infrastructure", "reason": "Preempted", "evidence": ["master-0: pod Preempted (Kueue)"]}
NODE_LOST = {"class": "infrastructure", "reason": "DeletionByTaintManager", "evidence": ["worker-0: node NotReady"]}
IMAGE_PULL = {"class": "infrastructure", "reason": "ImagePullBackOff", "evidence": ["master-0: ImagePullBackOff"]}


def test_every_rescheduled_reason_is_a_disruption_the_classifier_knows() -> None:
    from airflow_provider_disttrain.failures.failure_class import DISRUPTION, INFRASTRUCTURE, REASONS

    known = {
        reason for (_, reason), (cls, strength) in REASONS.items() if (cls, strength) == (INFRASTRUCTURE, DISRUPTION)
    }
    assert known >= retry_policy.DISRUPTIONS


@pytest.mark.parametrize("failure", [PREEMPTED, NODE_LOST], ids=["kueue-preemption", "node-lost"])
def test_a_preemption_or_a_lost_node_reschedules_only_when_asked(failure: dict[str, Any]) -> None:
    error = classed_error(JobFailedError, failure, "m")

    rescheduled = decide(error, timedelta(minutes=1), reschedule=True)

    assert (rescheduled.action, rescheduled.delay) == ("reschedule", timedelta(minutes=1))
    assert rescheduled.reason is not None and "rescheduled without using a retry" in rescheduled.reason
    assert decide(error, timedelta(minutes=1)).action == "retry"  # Airflow 3.3: as before
    assert decide(classed_error(JobFailedError, IMAGE_PULL, "m"), reschedule=True).action == "retry"


def test_the_policy_reschedules_a_preemption_on_airflow_3_4_and_retries_it_before() -> None:
    """3.4+: RESCHEDULE bounded by max_reschedules (a retry is not used); 3.3: RETRY, as it always was."""
    if not HAS_RETRY_POLICY:
        pytest.skip("Airflow 3.2 has no retry_policy (test_the_ready_policy_on_this_airflow)")
    from airflow.sdk.definitions.retry_policy import RetryAction, RetryDecision

    policy = retry_policy.DisttrainRetryPolicy(infrastructure_delay=timedelta(seconds=30), max_reschedules=5)
    decision = policy.evaluate(classed_error(JobFailedError, PREEMPTED, "m"), try_number=1, max_tries=3)
    if hasattr(RetryAction, "RESCHEDULE"):
        assert (decision.action, decision.max_reschedules, decision.retry_delay) == (
            RetryAction.RESCHEDULE,
            5,
            timedelta(seconds=30),
        )
    else:
        assert decision == RetryDecision(
            RetryAction.RETRY, timedelta(seconds=30), "the infrastructure's failure (Preempted): retried"
        )
    never = retry_policy.DisttrainRetryPolicy(max_reschedules=0)
    assert never.evaluate(classed_error(JobFailedError, PREEMPTED, "m"), 1, 3).action is RetryAction.RETRY
    assert type(policy).deserialize(policy.serialize()).max_reschedules == 5
    assert type(policy).deserialize({"infrastructure_delay": 60.0}).max_reschedules == 3  # a DAG serialized before
    with pytest.raises(ValueError, match="max_reschedules"):
        retry_policy.DisttrainRetryPolicy(max_reschedules=-1)
