"""What the trigger tests share: a trigger aimed at the fake API server, and running it to its one event."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
from tests.unit.fakes import make_job

EVENT_KEYS = {"status", "kind", "name", "namespace", "state", "message", "job"}
OPTIONAL_EVENT_KEYS = {"pods"}  # only when the trigger kept a MultiKueue worker's pods
RUN_TIMEOUT = 600.0  # virtual seconds: a guard against a trigger that never fires


def job(status: dict[str, Any] | None = None, *, labelled: bool = True, uid: str = "uid-1") -> dict[str, Any]:
    labels = {TASK_INSTANCE_LABEL: "abc123"} if labelled else {}
    return make_job("train-abc", "ml", uid=uid, status=status, labels=labels)


def make_trigger(apiserver: Any, **overrides: Any) -> TrainingJobTrigger:
    kwargs: dict[str, Any] = {
        "kind": "PyTorchJob",
        "name": "train-abc",
        "namespace": "ml",
        "uid": "uid-1",
        "config_dict": apiserver.kubeconfig(),
        "poll_interval": 0.05,
        "api_failure_tolerance": 60.0,
    }
    kwargs.update(overrides)
    return TrainingJobTrigger(**kwargs)


async def run_once(trigger: TrainingJobTrigger, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    """The trigger's single event (it must fire exactly one, and never raise)."""

    async def collect() -> list[TriggerEvent]:
        return [event async for event in trigger.run()]

    events = await asyncio.wait_for(collect(), timeout)
    assert len(events) == 1
    payload = events[0].payload
    assert set(payload) - OPTIONAL_EVENT_KEYS == EVENT_KEYS
    assert (payload["kind"], payload["name"], payload["namespace"]) == (trigger.kind, trigger.name, "ml")
    json.dumps(payload)  # it is stored in the metadata database
    return payload


async def started(trigger: TrainingJobTrigger, apiserver: Any, watches: int = 1) -> asyncio.Task[dict[str, Any]]:
    """Run the trigger in the background until ``watches`` watch requests are open on the server."""
    task = asyncio.create_task(run_once(trigger))
    deadline = asyncio.get_running_loop().time() + 60
    while apiserver.open_watches < watches and not task.done():
        assert asyncio.get_running_loop().time() < deadline, "the trigger opened no watch"
        await asyncio.sleep(0.01)
    return task
