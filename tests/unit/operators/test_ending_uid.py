"""The ending reads the job by name: only the job of the uid the task recorded may settle or explain it.

A timeout judged on a stale look is settled by a fresh read (``outcome.settle_timeout``). When the
task's job was deleted and another run (or a person) created one under the same name since, that read
returns the other job: it must count as gone, so its state does not end the task, its result does not
become the task's, and its pods' logs are not copied into the task's log.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import JobTimeoutError, TrainingJobError
from airflow_provider_disttrain.job.outcome import ERROR, TIMEOUT, JobRef, Outcome, make_outcome, settle_timeout
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from tests.unit.fakes import (
    FakeTrainingJobHook,
    failed_status,
    make_context,
    make_job,
    make_pod,
    running_status,
    succeeded_status,
    with_hook,
)

REF = JobRef("PyTorchJob", "train-abc", "default", "uid-1")
OTHER_RUNS_LOG_LINE = "the other run's epoch 9 of 9\n"


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> TrainingJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "image": "trainer:1",
        "num_workers": 1,
        "job_name": "train-abc",
        "wait_policy": WaitPolicy(poll_interval=0.01),
    }
    arguments.update(kwargs)
    return with_hook(TrainingJobOperator(**arguments), hook)


def another_run_under_the_name(status: dict[str, Any]) -> FakeTrainingJobHook:
    """Our job (uid-1) is gone; another run's job of the same name (uid-2) is there, with a pod and a log."""
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("train-abc", uid="uid-2", status=status))
    hook.pods["train-abc"] = [make_pod("train-abc", "master", 0, phase="Succeeded")]
    hook.logs["train-abc-master-0"] = OTHER_RUNS_LOG_LINE
    return hook


def timed_out() -> dict[str, Any]:
    """The trigger's timeout, judged on a look at our job (uid-1) while it ran."""
    return make_outcome(REF, TIMEOUT, "did not finish within the task's execution_timeout", None)


@pytest.mark.parametrize("other_status", [succeeded_status(), failed_status()], ids=["succeeded", "failed"])
def test_settle_timeout_ignores_a_finished_job_of_another_uid(other_status: dict[str, Any]) -> None:
    outcome = Outcome.from_event(timed_out())
    other = make_job("train-abc", uid="uid-2", status=other_status)

    assert settle_timeout(REF, outcome, other) is outcome


def test_settle_timeout_still_settles_with_the_tasks_own_job() -> None:
    outcome = Outcome.from_event(timed_out())
    own = make_job("train-abc", uid="uid-1", status=succeeded_status())

    assert settle_timeout(REF, outcome, own).status == "success"


@pytest.mark.parametrize("other_status", [succeeded_status(), failed_status()], ids=["succeeded", "failed"])
def test_a_timeout_is_not_settled_by_another_job_that_now_has_the_name(
    other_status: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    hook = another_run_under_the_name(other_status)

    with pytest.raises(JobTimeoutError) as raised:
        make_operator(hook).execute_complete(make_context(), timed_out(), job_uid="uid-1")

    assert "now names another job (uid uid-2)" in str(raised.value)
    assert "this task's job (uid uid-1) is gone" in str(raised.value)
    # The other run's pods are neither diagnosed nor copied into this task's log.
    assert hook.called("read_pod_log") == []
    assert hook.called("list_job_pods") == []
    assert OTHER_RUNS_LOG_LINE.strip() not in capsys.readouterr().out
    assert hook.job("train-abc") is not None


def test_a_timeout_with_delete_on_timeout_does_not_say_it_deleted_another_job() -> None:
    hook = another_run_under_the_name(running_status())

    with pytest.raises(JobTimeoutError) as raised:
        make_operator(hook, cleanup_policy=CleanupPolicy(on_timeout=True)).execute_complete(
            make_context(), timed_out(), job_uid="uid-1"
        )

    assert all(kwargs["uid"] == "uid-1" for _, kwargs in hook.called("delete_job"))
    assert hook.job("train-abc") is not None
    assert "was deleted" not in str(raised.value)


def test_an_error_on_the_last_try_explains_with_the_tasks_job_gone_not_the_others_pods() -> None:
    hook = another_run_under_the_name(running_status())
    event = make_outcome(REF, ERROR, "lost contact with the API server", None)

    with pytest.raises(TrainingJobError) as raised:
        make_operator(hook, retries=0).execute_complete(make_context(), event, job_uid="uid-1")

    assert "now names another job (uid uid-2)" in str(raised.value)
    assert "last try" not in str(raised.value)
    assert hook.called("list_job_pods") == []
    assert hook.job("train-abc") is not None
