"""A TrainJob whose trainer reports progress (``trainerStatus``; the deferred task's progress lines show it:
tests/unit/triggers/test_train_job_trigger_progress.py): the result's ``metrics`` hold the final
``trainerStatus.metrics`` beside the leader's termination message (which wins a name both have), in both
modes. Statuses: TrainJobs read back from the local cluster's API server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.job.outcome import JobRef, check_job
from tests.unit.fakes import make_context
from tests.unit.operators.test_train_job import make_hook, make_operator, node_pod

NAME = "tj-progress"
LEADER = {"loss": 0.07912, "tokens": 123456}


@pytest.fixture
def logged() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as events:
        yield events


def said(events: list[MutableMapping[str, Any]]) -> list[str]:
    return [str(e["event"]) % tuple(e.get("positional_args", ())) for e in events]


def finished_nodes() -> list[dict[str, Any]]:
    done = {"reason": "Completed", "exitCode": 0, "finishedAt": "2026-12-02T07:38:40Z"}
    return [
        node_pod(NAME, 0, terminated={**done, "message": json.dumps(LEADER)}),
        node_pod(NAME, 1, terminated=done),
    ]


def test_sync_result_combines_the_metrics_and_says_so(logged: list[MutableMapping[str, Any]]) -> None:
    hook = make_hook("running-progress", "complete-progress")
    hook.pods[NAME] = finished_nodes()

    result = make_operator(hook, job_name=NAME).execute(make_context())

    assert [line for line in said(logged) if line.startswith("Training metrics")] == [
        'Training metrics from the leader: {"loss": 0.07912, "tokens": 123456}',
        'Training metrics in the result: {"epoch": 3, "eval_accuracy": 0.9612, "loss": 0.07912, "tokens": 123456}',
    ]
    assert result["metrics"] == {"loss": 0.07912, "tokens": 123456, "eval_accuracy": 0.9612, "epoch": 3}
    assert result["trainer_status"]["metrics"] == {"loss": 0.0831, "eval_accuracy": 0.9612, "epoch": 3}
    assert result["trainer_status"]["progress_percentage"] == 100


def test_deferred_result_combines_them_from_the_trigger_s_event() -> None:
    hook = make_hook("complete-progress")
    operator = make_operator(hook, job_name=NAME, deferrable=True)
    hook.create_job("TrainJob", operator.build_job_manifest(make_context(), "default"), "default")
    finished = hook.get_job("TrainJob", NAME, "default")
    assert finished is not None
    hook.pods[NAME] = finished_nodes()
    uid = finished["metadata"]["uid"]
    event = check_job(JobRef("TrainJob", NAME, "default", uid), finished, now=time.time())
    assert event is not None and event["status"] == "success"
    # The event crosses the triggerer as JSON.
    event = json.loads(json.dumps(event))

    result = operator.execute_complete(make_context(), event, job_uid=uid)

    assert result["metrics"] == {"loss": 0.07912, "tokens": 123456, "eval_accuracy": 0.9612, "epoch": 3}


def test_without_a_termination_message_the_trainer_s_metrics_are_the_result_s() -> None:
    hook = make_hook("running-progress", "complete-progress")
    done = {"reason": "Completed", "exitCode": 0}
    hook.pods[NAME] = [node_pod(NAME, 0, terminated=done), node_pod(NAME, 1, terminated=done)]

    result = make_operator(hook, job_name=NAME).execute(make_context())

    assert result["metrics"] == {"loss": 0.0831, "eval_accuracy": 0.9612, "epoch": 3}
