"""Suspend, resume, scale, delete and sense a TrainJob: the same operators, through the kinds table."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import PokeReturnValue

from airflow_provider_disttrain.exceptions import InvalidJobSpecError, JobFailedError
from airflow_provider_disttrain.operators.manage import (
    DeleteTrainingJobOperator,
    ResumeTrainingJobOperator,
    ScaleTrainingJobOperator,
    SuspendTrainingJobOperator,
)
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from tests.unit.conftest import read_yaml
from tests.unit.fakes import FakeTrainingJobHook, ManualClock, make_context, with_hook


def hook_with(state: str, progression: tuple[str, ...] = (), **kwargs: Any) -> FakeTrainingJobHook:
    hook = FakeTrainingJobHook(namespace="kubeflow", **kwargs)
    hook.add_job(
        read_yaml(f"status/trainjob-{state}.yaml"),
        [read_yaml(f"status/trainjob-{step}.yaml")["status"] for step in progression],
    )
    return hook


def manage(operator_class: type, hook: FakeTrainingJobHook, **kwargs: Any) -> Any:
    operator = operator_class(task_id="t", job_name="multi-node-example", kind="TrainJob", **kwargs)
    return with_hook(operator, hook).execute(make_context())


def test_suspend_sets_the_trainjob_s_spec_suspend() -> None:
    hook = hook_with("running")

    result = manage(SuspendTrainingJobOperator, hook)

    assert hook.called("patch_job")[0][0] == ("TrainJob", "multi-node-example", "kubeflow", {"spec": {"suspend": True}})
    assert hook.job("multi-node-example", "kubeflow")["spec"]["suspend"] is True
    assert "runPolicy" not in hook.job("multi-node-example", "kubeflow")["spec"]
    assert result["kind"] == "TrainJob"


def test_resume_clears_it() -> None:
    hook = hook_with("suspended")
    manage(ResumeTrainingJobOperator, hook)
    assert hook.called("patch_job")[0][0][3] == {"spec": {"suspend": False}}


@pytest.mark.parametrize("state", ["running", "suspended"])
def test_scaling_a_trainjob_is_refused_before_any_patch(state: str) -> None:
    hook = hook_with(state)

    with pytest.raises(InvalidJobSpecError) as raised:
        manage(ScaleTrainingJobOperator, hook, replicas=4)

    assert raised.value.field == "spec.trainer.numNodes"
    assert "cannot change once it is created" in raised.value.problem
    assert hook.called("patch_job") == []


def test_delete_deletes_the_trainjob() -> None:
    hook = hook_with("running")
    assert manage(DeleteTrainingJobOperator, hook) is True
    assert hook.called("delete_job")[0][0][:3] == ("TrainJob", "multi-node-example", "kubeflow")
    assert hook.job("multi-node-example", "kubeflow") is None


def test_the_sensor_reads_trainer_s_conditions() -> None:
    clock = ManualClock()
    hook = hook_with("pending", ("running", "complete"), clock=clock, step_seconds=10.0)  # one step per poke
    sensor = with_hook(
        TrainingJobSensor(task_id="wait", job_name="multi-node-example", kind="TrainJob", poke_interval=10), hook
    )

    assert sensor.poke(make_context()) is False
    clock.sleep_sync(10.0)  # the poke interval
    done = sensor.poke(make_context())

    assert isinstance(done, PokeReturnValue) and done.is_done
    assert done.xcom_value["state"] == "succeeded"
    assert done.xcom_value["replica_statuses"] == {"node": {"active": 0, "succeeded": 1, "failed": 0}}


def test_the_sensor_fails_with_trainer_s_reason() -> None:
    hook = hook_with("failed")
    sensor = with_hook(TrainingJobSensor(task_id="wait", job_name="multi-node-example", kind="TrainJob"), hook)
    with pytest.raises(JobFailedError, match="Failed condition: FailedJobs: jobset failed"):
        sensor.poke(make_context())
