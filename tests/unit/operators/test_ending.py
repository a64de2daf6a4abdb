"""The operator's result carries the leader's metrics (its termination message), in both modes.

The hook is ``FakeTrainingJobHook``; the pods are what the API server would return at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.job.outcome import JobRef, check_job
from tests.unit.fakes import (
    END,
    RUNNING_AT,
    FakeTrainingJobHook,
    make_context,
    make_pod,
    running_status,
    succeeded_status,
)
from tests.unit.operators.test_training_job import make_operator, progressing

NAME = "train-abc"
METRICS = '{"accuracy": 0.91, "loss": 0.21, "epochs": 3}'


@pytest.fixture
def logged() -> Iterator[list[MutableMapping[str, Any]]]:
    """What the operator logs (its ``log`` is a structlog logger), as event dicts."""
    with structlog.testing.capture_logs() as events:
        yield events


def lines(events: list[MutableMapping[str, Any]], containing: str) -> list[str]:
    said = [str(e["event"]) % tuple(e.get("positional_args", ())) for e in events]
    return [line for line in said if containing in line]


def finished_pods(master_message: str | None) -> list[dict[str, Any]]:
    def terminated(message: str | None) -> dict[str, Any]:
        state = {"reason": "Completed", "exitCode": 0, "startedAt": RUNNING_AT, "finishedAt": END}
        return {**state, "message": message} if message is not None else state

    return [
        make_pod(NAME, "master", 0, phase="Succeeded", terminated=terminated(master_message)),
        make_pod(NAME, "worker", 0, phase="Succeeded", terminated=terminated('{"accuracy": 0.0}')),
    ]


def test_sync_result_has_the_masters_metrics(logged: list[MutableMapping[str, Any]]) -> None:
    hook = progressing(running_status(), succeeded_status())
    hook.pods[NAME] = finished_pods(METRICS)

    result = make_operator(hook, job_name=NAME).execute(make_context())

    assert result["metrics"] == {"accuracy": 0.91, "loss": 0.21, "epochs": 3}
    assert result["state"] == "succeeded"
    assert lines(logged, "Training metrics from the leader") == [
        'Training metrics from the leader: {"accuracy": 0.91, "epochs": 3, "loss": 0.21}'
    ]


def test_deferred_result_has_them_too_from_the_one_list_that_also_serves_the_logs() -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    operator = make_operator(hook, job_name=NAME, deferrable=True)
    finished_job = hook.create_job("PyTorchJob", operator.build_job_manifest(make_context(), "default"), "default")
    finished_job = hook.get_job("PyTorchJob", NAME, "default")
    assert finished_job is not None
    hook.pods[NAME] = finished_pods(METRICS)
    hook.logs[f"{NAME}-master-0"] = "training finished\n"
    uid = finished_job["metadata"]["uid"]
    # What the trigger sends for a job it saw succeed.
    event = check_job(JobRef("PyTorchJob", NAME, "default", uid), finished_job, now=time.time())
    assert event is not None and event["status"] == "success"

    result = operator.execute_complete(make_context(), event, job_uid=uid)

    assert result["metrics"]["accuracy"] == 0.91
    assert len(hook.called("list_job_pods")) == 1
    assert hook.called("read_pod_log")  # the same listing chose the pod whose log was copied


@pytest.mark.parametrize(
    ("message", "pods", "why"),
    [
        ("accuracy=0.9", True, "is not JSON"),
        ("[0.9]", True, "is JSON but not an object"),
        (None, True, "wrote no termination message"),
        (None, False, "the leader pod is gone"),
    ],
)
def test_without_usable_metrics_the_key_is_absent_and_one_line_says_why(
    logged: list[MutableMapping[str, Any]], message: str | None, pods: bool, why: str
) -> None:
    hook = progressing(running_status(), succeeded_status())
    if pods:
        hook.pods[NAME] = finished_pods(message)

    result = make_operator(hook, job_name=NAME).execute(make_context())

    assert "metrics" not in result
    said = lines(logged, "metrics")
    assert len(said) == 1 and why in said[0], said


def test_pods_that_cannot_be_listed_do_not_fail_a_job_that_succeeded(logged: list[MutableMapping[str, Any]]) -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    operator = make_operator(hook, job_name=NAME, deferrable=True)
    hook.create_job("PyTorchJob", operator.build_job_manifest(make_context(), "default"), "default")
    finished_job = hook.get_job("PyTorchJob", NAME, "default")
    assert finished_job is not None
    uid = finished_job["metadata"]["uid"]

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("API server restarting")

    hook.list_job_pods = refused  # type: ignore[method-assign]
    event = check_job(JobRef("PyTorchJob", NAME, "default", uid), finished_job, now=time.time())
    assert event is not None

    result = operator.execute_complete(make_context(), event, job_uid=uid)

    assert result["state"] == "succeeded" and "metrics" not in result
    assert len(lines(logged, "Could not list the pods")) == 1
