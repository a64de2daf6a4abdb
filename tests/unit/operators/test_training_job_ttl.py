"""``ttlSecondsAfterFinished`` must leave the wait time to see the job finish.

The Kubeflow operators delete a finished job ``ttlSecondsAfterFinished`` seconds after it finished. A
wait that reads the job every ``poll_interval`` seconds can miss the whole time the finished job
exists, and would then report a succeeded job as "deleted outside this task". So a TTL shorter than
two poll intervals is refused, naming the field, before anything is sent to the cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import RunPolicy, WaitPolicy
from tests.unit.fakes import FakeTrainingJobHook, make_context, succeeded_status, with_hook

MANIFEST = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "nightly"},
    "spec": {
        "runPolicy": {"ttlSecondsAfterFinished": 5},
        "pytorchReplicaSpecs": {
            "Worker": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": "t:1"}]}}}
        },
    },
}


def run(**kwargs: Any) -> FakeTrainingJobHook:
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    arguments: dict[str, Any] = {"task_id": "train", "wait_policy": WaitPolicy(poll_interval=10)}
    arguments.update(kwargs)
    with_hook(TrainingJobOperator(**arguments), hook).execute(make_context())
    return hook


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (
            {"image": "t:1", "num_workers": 1, "run_policy": RunPolicy(ttl_seconds_after_finished=5)},
            "run_policy.ttl_seconds_after_finished",
        ),
        (
            {"image": "t:1", "num_workers": 1, "run_policy": RunPolicy(ttl_seconds_after_finished=0)},
            "run_policy.ttl_seconds_after_finished",
        ),
        ({"job_manifest": MANIFEST}, "spec.runPolicy.ttlSecondsAfterFinished"),
        ({"job_manifest": MANIFEST, "deferrable": True}, "spec.runPolicy.ttlSecondsAfterFinished"),
    ],
    ids=["parameter", "zero", "manifest", "deferrable"],
)
def test_a_ttl_shorter_than_two_poll_intervals_is_refused_before_anything_is_sent(kwargs: dict, field: str) -> None:
    hook = FakeTrainingJobHook()
    operator = with_hook(
        TrainingJobOperator(task_id="train", **kwargs, wait_policy=WaitPolicy(poll_interval=10, startup_timeout=0.01)),
        hook,
    )

    with pytest.raises(InvalidJobSpecError) as raised:
        operator.execute(make_context())

    assert raised.value.field == field
    assert "poll_interval (10s)" in str(raised.value)
    assert "cleanup_policy.on_finish" in str(raised.value)  # what to use instead
    assert hook.api_calls() == []


def test_a_ttl_of_two_poll_intervals_or_more_is_accepted() -> None:
    hook = run(image="t:1", num_workers=1, run_policy=RunPolicy(ttl_seconds_after_finished=20))

    assert hook.submitted_manifest()["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 20


def test_a_short_ttl_is_fine_when_the_task_does_not_wait() -> None:
    hook = run(job_manifest=MANIFEST, wait_for_completion=False)

    assert hook.submitted_manifest()["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 5


def test_the_parameter_wins_over_the_manifest() -> None:
    hook = run(job_manifest=MANIFEST, run_policy=RunPolicy(ttl_seconds_after_finished=60))

    assert hook.submitted_manifest()["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 60
