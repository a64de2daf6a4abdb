"""A retry never trains again what an earlier try of the task instance already trained.

The task state store (Airflow >= 3.3) keeps the job's identity, its result once it succeeded, and
whether the task instance itself succeeded: a try after a failed or interrupted one (a retry) takes
the earlier job's result; a try after a *successful* one can only be a user's deliberate clear, and
trains anew. ``FakeTrainingJobHook`` stands in for the cluster, ``FakeStateStore`` for the store.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.job.outcome import JobRef, check_job
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.ownership.identity import STATE_STORE_KEY
from airflow_provider_disttrain.ownership.naming import task_instance_labels
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from tests.unit.fakes import (
    FakeStateStore,
    FakeTI,
    FakeTrainingJobHook,
    failed_status,
    make_context,
    make_job,
    running_status,
    succeeded_status,
    with_hook,
)


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> TrainingJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "image": "trainer:1",
        "num_workers": 1,
        # a job that never gets a status (a wrong new submission) fails fast
        "wait_policy": WaitPolicy(poll_interval=0.01, startup_timeout=2),
    }
    arguments.update(kwargs)
    return with_hook(TrainingJobOperator(**arguments), hook)


def earlier_job(ti: FakeTI, status: dict[str, Any], name: str = "train-old") -> dict[str, Any]:
    labels = task_instance_labels(ti.dag_id, ti.task_id, ti.run_id, ti.map_index, 1)
    return make_job(name, uid="uid-7", status=status, labels=labels)


def saved(job: dict[str, Any], **fields: Any) -> FakeStateStore:
    metadata = job["metadata"]
    entry = {"kind": "PyTorchJob", "name": metadata["name"], "namespace": metadata["namespace"], "uid": "uid-7"}
    return FakeStateStore({STATE_STORE_KEY: {**entry, **fields}})


def test_a_retry_after_the_job_succeeded_returns_its_result_and_trains_nothing() -> None:
    """The first try's worker died after the job succeeded (or its delete_on_finish was refused)."""
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook()
    job = hook.add_job(earlier_job(ti, succeeded_status()))

    result = make_operator(hook).execute(make_context(ti, saved(job)))

    assert (result["name"], result["uid"], result["state"]) == ("train-old", "uid-7", "succeeded")
    assert hook.called("create_job") == []
    assert hook.called("delete_job") == []
    assert ti.xcoms == {"job_name": "train-old", "job_namespace": "default"}


def test_a_retry_returns_the_stored_result_when_the_succeeded_job_is_gone() -> None:
    """delete_on_finish (or ttlSecondsAfterFinished) removed the job before the first try could return."""
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    job = earlier_job(ti, succeeded_status())
    stored = JobView.of(job).result("PyTorchJob")

    result = make_operator(hook).execute(make_context(ti, saved(job, result=stored)))

    assert result == stored
    assert hook.called("create_job") == []


def test_an_explicit_name_retry_keeps_its_own_succeeded_job() -> None:
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook()
    job = hook.add_job(earlier_job(ti, succeeded_status(), name="nightly"))

    result = make_operator(hook, job_name="nightly").execute(make_context(ti, saved(job)))

    assert result["uid"] == "uid-7"
    assert hook.called("delete_job") == []
    assert hook.called("create_job") == []


def test_a_retry_applies_delete_on_finish_to_the_earlier_succeeded_job() -> None:
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook()
    job = hook.add_job(earlier_job(ti, succeeded_status()))

    make_operator(hook, cleanup_policy=CleanupPolicy(on_finish="succeeded")).execute(make_context(ti, saved(job)))

    assert hook.job("train-old") is None
    assert hook.called("delete_job")[0][1]["uid"] == "uid-7"


def test_a_clear_after_the_task_succeeded_trains_again() -> None:
    """The task instance succeeded, then a user cleared it: that is a request for a new training."""
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    job = hook.add_job(earlier_job(ti, succeeded_status()))
    store = saved(job, result=JobView.of(job).result("PyTorchJob"), task_succeeded=True)

    result = make_operator(hook).execute(make_context(ti, store))

    assert result["name"] != "train-old"
    assert len(hook.called("create_job")) == 1
    assert store.get(STATE_STORE_KEY)["uid"] == result["uid"]
    assert hook.job("train-old") is not None  # the earlier training's job is left as it was


def test_a_clear_of_an_explicitly_named_succeeded_task_replaces_its_job() -> None:
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    job = hook.add_job(earlier_job(ti, succeeded_status(), name="nightly"))

    result = make_operator(hook, job_name="nightly").execute(make_context(ti, saved(job, task_succeeded=True)))

    assert result["uid"] == "uid-created-1"
    assert hook.called("delete_job")[0][1]["uid"] == "uid-7"


def test_a_retry_after_the_job_failed_trains_again() -> None:
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    job = hook.add_job(earlier_job(ti, failed_status()))

    result = make_operator(hook).execute(make_context(ti, saved(job)))

    assert result["name"] != "train-old"
    assert len(hook.called("create_job")) == 1


@pytest.mark.parametrize("delete_on_finish", ["never", "succeeded"])
def test_a_successful_try_leaves_its_result_and_its_success_in_the_store(delete_on_finish: str) -> None:
    hook = FakeTrainingJobHook(progression=[running_status(), succeeded_status()])
    store = FakeStateStore()

    result = make_operator(hook, cleanup_policy=CleanupPolicy(on_finish=delete_on_finish)).execute(
        make_context(FakeTI(), store)
    )

    entry = store.get(STATE_STORE_KEY)
    assert entry["uid"] == result["uid"] == "uid-created-1"
    assert entry["result"] == result
    assert entry["task_succeeded"] is True


def test_the_result_is_stored_before_delete_on_finish_removes_the_job() -> None:
    """If the worker dies between the delete and the task's success, the retry still has the result."""
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    store = FakeStateStore()
    entries_at_delete: list[Any] = []
    delete_job = hook.delete_job

    def delete_and_die(*args: Any, **kwargs: Any) -> bool:
        entries_at_delete.append(store.get(STATE_STORE_KEY))
        delete_job(*args, **kwargs)
        raise SystemExit("worker lost right after deleting")

    hook.delete_job = delete_and_die  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        make_operator(hook, cleanup_policy=CleanupPolicy(on_finish="succeeded")).execute(make_context(FakeTI(), store))

    [entry] = entries_at_delete
    assert entry["result"]["state"] == "succeeded"
    assert "task_succeeded" not in entry
    retry = FakeTrainingJobHook()
    assert make_operator(retry).execute(make_context(FakeTI(try_number=2), store)) == entry["result"]
    assert retry.called("create_job") == []


def test_the_deferrable_ending_stores_the_result_and_the_success_too() -> None:
    hook = FakeTrainingJobHook()
    job = hook.add_job(make_job("train-abc", uid="uid-1", status=succeeded_status()))
    entry = {"kind": "PyTorchJob", "name": "train-abc", "namespace": "default", "uid": "uid-1"}
    store = FakeStateStore({STATE_STORE_KEY: entry})
    # The event the trigger fires: check_job's outcome for the succeeded job.
    event = check_job(JobRef("PyTorchJob", "train-abc", "default", "uid-1"), job, now=0.0)

    make_operator(hook).execute_complete(make_context(FakeTI(), store), event, job_uid="uid-1")

    entry = store.get(STATE_STORE_KEY)
    assert entry["task_succeeded"] is True
    assert entry["result"]["uid"] == "uid-1"
