"""Timeouts of a deferred training task, as Airflow 3 enforces them.

Airflow 3 (checked against 3.3's execution API and scheduler) does not time out a task deferred from
``execute`` by its ``execution_timeout``: the deferral's ``trigger_timeout`` is set only from the
``timeout`` the operator passes to ``defer``. So the trigger enforces ``execution_timeout`` (its
``execution_deadline``), and the operator passes a deferral timeout a little later as a backstop: if
the trigger never reports (a triggerer that is down), the scheduler fails the deferral, the task
resumes with ``TaskDeferralTimeout`` and deletes its job, pinned to the job's uid.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.exceptions import TaskDeferralTimeout, TaskDeferred

from airflow_provider_disttrain.job.deadlines import DEFERRAL_BACKSTOP
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.ownership.naming import task_instance_labels
from airflow_provider_disttrain.parameters import CleanupPolicy
from tests.unit.fakes import FakeTI, FakeTrainingJobHook, make_context, make_job, running_status, with_hook


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> TrainingJobOperator:
    arguments: dict[str, Any] = {"task_id": "train", "image": "trainer:1", "num_workers": 1, "deferrable": True}
    arguments.update(kwargs)
    return with_hook(TrainingJobOperator(**arguments), hook)


def labels_of(ti: FakeTI) -> dict[str, str]:
    return task_instance_labels(ti.dag_id, ti.task_id, ti.run_id, ti.map_index, ti.try_number)


def timed_out_deferral(operator: TrainingJobOperator, ti: FakeTI) -> None:
    """What the task runner calls after the scheduler's ``check_trigger_timeouts`` failed the deferral."""
    with pytest.raises(TaskDeferralTimeout):
        operator.resume_execution(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, make_context(ti))


def test_the_trigger_enforces_execution_timeout_and_the_deferral_timeout_is_a_later_backstop() -> None:
    hook = FakeTrainingJobHook(progression=[running_status()])
    started = datetime.now(timezone.utc) - timedelta(minutes=10)
    operator = make_operator(hook, execution_timeout=timedelta(hours=1))

    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(make_context(FakeTI(start_date=started)))

    deadline = started.timestamp() + 3600
    assert deferred.value.trigger.deadlines.execution == deadline
    timeout = deferred.value.timeout
    assert timeout is not None
    # Measured from the moment of deferral, which is when Airflow starts counting it.
    remaining = timedelta(minutes=50)
    assert remaining + DEFERRAL_BACKSTOP - timedelta(seconds=5) <= timeout <= remaining + DEFERRAL_BACKSTOP


def test_without_execution_timeout_the_deferral_has_no_timeout() -> None:
    hook = FakeTrainingJobHook(progression=[running_status()])

    with pytest.raises(TaskDeferred) as deferred:
        make_operator(hook).execute(make_context())

    assert deferred.value.timeout is None
    assert deferred.value.trigger.deadlines.execution is None


def test_a_timed_out_deferral_deletes_its_own_job_with_the_uid_precondition() -> None:
    hook = FakeTrainingJobHook()
    ti = FakeTI()
    hook.add_job(make_job("train-abc", uid="uid-1", status=running_status(), labels=labels_of(ti)))
    ti.xcoms.update(job_name="train-abc", job_namespace="default")

    timed_out_deferral(make_operator(hook), ti)

    [(args, kwargs)] = hook.called("delete_job")
    assert args[1:] == ("train-abc", "default")
    assert kwargs["uid"] == "uid-1"
    assert hook.job("train-abc") is None


def test_a_timed_out_deferral_leaves_a_same_named_job_of_another_task_alone() -> None:
    """Someone deleted our job and created theirs under the name: the label says it is not ours."""
    hook = FakeTrainingJobHook()
    ti = FakeTI()
    other = FakeTI(dag_id="another_dag")
    hook.add_job(make_job("train-abc", uid="uid-9", status=running_status(), labels=labels_of(other)))
    ti.xcoms.update(job_name="train-abc", job_namespace="default")

    timed_out_deferral(make_operator(hook), ti)

    assert hook.called("delete_job") == []
    assert hook.job("train-abc") is not None


def test_a_timed_out_deferral_keeps_the_job_with_delete_on_timeout_false() -> None:
    hook = FakeTrainingJobHook()
    ti = FakeTI()
    hook.add_job(make_job("train-abc", uid="uid-1", status=running_status(), labels=labels_of(ti)))
    ti.xcoms.update(job_name="train-abc", job_namespace="default")

    timed_out_deferral(make_operator(hook, cleanup_policy=CleanupPolicy(on_timeout=False)), ti)

    assert hook.called("delete_job") == []
