"""The trigger waiting on a TrainJob: the same shared LIST + WATCH (of ``trainjobs``), Trainer's status read."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
from tests.unit.conftest import read_yaml
from tests.unit.fakes import epoch
from tests.unit.triggers import helpers
from tests.unit.triggers.helpers import run_once

# Trigger and watch stories run on virtual time (tests/unit/conftest.py: virtual_clock).
pytestmark = pytest.mark.usefixtures("virtual_clock")


def train_job(state: str) -> dict[str, Any]:
    job = read_yaml(f"status/trainjob-{state}.yaml")
    job["metadata"].update(name="tj-1", namespace="ml", uid="uid-1", labels={TASK_INSTANCE_LABEL: "abc123"})
    return job


def make_trigger(apiserver: Any, **overrides: Any) -> TrainingJobTrigger:
    return helpers.make_trigger(apiserver, **{"kind": "TrainJob", "name": "tj-1", **overrides})


async def test_a_trainjob_s_completion_comes_through_the_watch_of_trainjobs(apiserver: Any) -> None:
    await apiserver.put(train_job("running"), plural="trainjobs")
    task = asyncio.create_task(run_once(make_trigger(apiserver)))
    while apiserver.open_watches < 1 and not task.done():
        await asyncio.sleep(0.01)

    await apiserver.put(train_job("complete"), plural="trainjobs")
    event = await task

    assert (event["status"], event["kind"], event["state"]) == ("success", "TrainJob", "succeeded")
    assert event["message"] == "TrainJob ml/tj-1 succeeded"
    assert event["job"]["replica_statuses"] == {"node": {"active": 0, "succeeded": 1, "failed": 0}}
    assert event["job"]["completion_time"] == "2024-05-14T09:22:08Z"
    assert (apiserver.count("list"), apiserver.count("watch")) == (1, 1)
    assert apiserver.queries("list")[0]["labelSelector"] == TASK_INSTANCE_LABEL  # the provider's jobs


async def test_a_failed_trainjob_carries_trainer_s_reason(apiserver: Any) -> None:
    await apiserver.put(train_job("failed"), plural="trainjobs")
    event = await run_once(make_trigger(apiserver))
    assert event["status"] == "failed"
    assert "FailedJobs: jobset failed due to one or more job failures" in event["message"]


async def test_node_pods_still_pending_are_held_to_the_startup_limit(apiserver: Any) -> None:
    await apiserver.put(train_job("pending"), plural="trainjobs")
    event = await run_once(make_trigger(apiserver, startup_deadline=epoch(-1)))
    assert event["status"] == "timeout"
    assert "did not start within startup_timeout; last state: queued" in event["message"]


async def test_a_trainjob_seen_running_then_suspended_is_not_held_to_the_startup_limit(apiserver: Any) -> None:
    await apiserver.put(train_job("running"), plural="trainjobs")
    task = asyncio.create_task(run_once(make_trigger(apiserver, startup_deadline=epoch(0.5))))
    while apiserver.open_watches < 1 and not task.done():
        await asyncio.sleep(0.01)
    await apiserver.put(train_job("suspended"), plural="trainjobs")
    await asyncio.sleep(1.0)  # past the startup deadline, suspended: still waiting
    assert not task.done()

    await apiserver.put(train_job("complete"), plural="trainjobs")
    assert (await task)["status"] == "success"
