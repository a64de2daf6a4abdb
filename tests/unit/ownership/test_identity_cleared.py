"""A task cleared while it waits: the new try may take over the job the old try's kill is deleting.

Airflow starts the new try at once and the old try's trigger deletes the job (``on_kill``) a moment
later. The new try, which reattached to that job through the task state store, must submit a fresh
job rather than fail on the earlier try's cleanup; a job this try submitted itself that is deleted
by someone else still ends the task with an error.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.exceptions import TaskDeferred

from airflow_provider_disttrain.exceptions import TrainingJobError
from airflow_provider_disttrain.job.outcome import ERROR, JobRef, make_outcome
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.ownership.identity import STATE_STORE_KEY
from airflow_provider_disttrain.parameters import WaitPolicy
from tests.unit.fakes import (
    FakeStateStore,
    FakeTI,
    FakeTrainingJobHook,
    make_context,
    make_job,
    running_status,
    succeeded_status,
    with_hook,
)

OLD = {"kind": "PyTorchJob", "name": "train-old", "namespace": "default", "uid": "uid-old"}


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> TrainingJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "kind": "PyTorchJob",
        "image": "ghcr.io/acme/train:1.0",
        "num_workers": 1,
        "wait_policy": WaitPolicy(poll_interval=0.01),
    }
    arguments.update(kwargs)
    return with_hook(TrainingJobOperator(**arguments), hook)


def cleared_try() -> tuple[FakeTrainingJobHook, FakeStateStore, FakeTI]:
    """The old try's job is still running when the new try starts; the store names it."""
    hook = FakeTrainingJobHook(progression=[running_status(), succeeded_status()])
    hook.add_job(make_job("train-old", uid="uid-old", status=running_status()), [running_status()])
    return hook, FakeStateStore({STATE_STORE_KEY: dict(OLD)}), FakeTI(try_number=2)


def test_sync_a_reattached_job_deleted_by_the_earlier_try_is_submitted_afresh() -> None:
    hook, store, ti = cleared_try()
    # The old try's trigger deletes the job right after the new try took it over.
    hook.on_get = lambda number: hook.forget("train-old") if number == 3 else None

    result = make_operator(hook).execute(make_context(ti, store))

    assert result["state"] == "succeeded"
    assert result["name"] != "train-old"
    assert len(hook.called("create_job")) == 1
    assert store.get(STATE_STORE_KEY)["name"] == result["name"]


def test_deferred_a_reattached_job_deleted_by_the_earlier_try_defers_on_a_fresh_job() -> None:
    hook, store, ti = cleared_try()
    operator = make_operator(hook, deferrable=True)
    with pytest.raises(TaskDeferred) as first:
        operator.execute(make_context(ti, store))
    assert first.value.kwargs == {"job_uid": "uid-old", "reattached": True}
    hook.forget("train-old")  # the old try's on_kill
    event = make_outcome(JobRef("PyTorchJob", "train-old", "default", "uid-old"), ERROR, "deleted outside this task")

    with pytest.raises(TaskDeferred) as second:
        operator.execute_complete(make_context(ti, store), event, **first.value.kwargs)

    assert len(hook.called("create_job")) == 1
    assert second.value.kwargs["reattached"] is False
    assert second.value.trigger.name != "train-old"


def test_a_job_this_try_submitted_and_someone_deleted_is_still_an_error() -> None:
    hook = FakeTrainingJobHook(progression=[running_status()])
    operator = make_operator(hook, deferrable=True)
    ti, store = FakeTI(), FakeStateStore()
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(make_context(ti, store))
    name = deferred.value.trigger.name
    hook.forget(name)
    event = make_outcome(JobRef("PyTorchJob", name, "default", deferred.value.kwargs["job_uid"]), ERROR, "deleted")

    with pytest.raises(TrainingJobError):
        operator.execute_complete(make_context(ti, store), event, **deferred.value.kwargs)

    assert len(hook.called("create_job")) == 1
