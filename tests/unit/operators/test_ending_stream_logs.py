"""``stream_logs``: the deferral asks the trigger to stream the leader's log, and the task's final copy
of the logs goes on from where the trigger's stream stopped instead of repeating it."""

from __future__ import annotations

import time
from collections.abc import Iterator, MutableMapping
from datetime import datetime
from typing import Any

import pytest
import structlog
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_disttrain.job.outcome import JobRef, check_job
from airflow_provider_disttrain.pods.live_logs import LOG_POSITION_ANNOTATION, encode_position
from airflow_provider_disttrain.pods.logs import LogCursor
from tests.unit.fakes import LOG_START, FakeTrainingJobHook, make_context, make_pod, running_status, succeeded_status
from tests.unit.operators.test_training_job import make_operator

NAME = "train-abc"
MASTER = f"{NAME}-master-0"


@pytest.fixture
def logged() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as events:
        yield events


def copied(events: list[MutableMapping[str, Any]]) -> list[str]:
    lines = [str(e["event"]) % tuple(e.get("positional_args", ())) for e in events]
    return [line.removeprefix(f"[{MASTER}] ") for line in lines if line.startswith(f"[{MASTER}] ")]


@pytest.mark.parametrize("stream_logs", [True, False])
def test_the_deferral_carries_stream_logs(stream_logs: bool) -> None:
    hook = FakeTrainingJobHook(progression=[running_status()])
    with pytest.raises(TaskDeferred) as deferred:
        make_operator(hook, job_name=NAME, deferrable=True, stream_logs=stream_logs).execute(make_context())
    assert deferred.value.trigger.serialize()[1]["stream_logs"] is stream_logs


@pytest.mark.parametrize(("streamed", "expected"), [(2, ["line 3"]), (None, ["line 1", "line 2", "line 3"])])
def test_the_final_copy_goes_on_after_the_streamed_lines(
    logged: list[MutableMapping[str, Any]], streamed: int | None, expected: list[str]
) -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    operator = make_operator(hook, job_name=NAME, deferrable=True, stream_logs=True)
    hook.create_job("PyTorchJob", operator.build_job_manifest(make_context(), "default"), "default")
    job = hook.get_job("PyTorchJob", NAME, "default")
    assert job is not None
    if streamed is not None:  # what the trigger recorded: it wrote the first `streamed` lines
        second = int(datetime.fromisoformat(f"{LOG_START}+00:00").timestamp()) * 1_000_000_000
        at = second + (streamed - 1) * 1000  # the fake's line i is stamped LOG_START + i microseconds
        job["metadata"]["annotations"] = {LOG_POSITION_ANNOTATION: encode_position(MASTER, LogCursor(at, 1))}
        hook.add_job(job)
    hook.pods[NAME] = [make_pod(NAME, "master", 0, phase="Succeeded")]
    hook.logs[MASTER] = "line 1\nline 2\nline 3\n"
    uid = job["metadata"]["uid"]
    event = check_job(JobRef("PyTorchJob", NAME, "default", uid), job, now=time.time())
    assert event is not None

    operator.execute_complete(make_context(), event, job_uid=uid)

    assert copied(logged) == expected
