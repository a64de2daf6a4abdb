"""A control-plane outage while a task waits deferred: the trigger, made by the operator from its
``WaitPolicy`` and restored from its stored row as the triggerer does, rides the outage out for
``api_failure_tolerance``; beyond it the event is ``lost_contact`` and the operator's ending fails the task
without deleting the job, even on its last try.

The trigger runs for real against the fake API server (``tests/unit/fake_apiserver.py``), on virtual time:
a 10 minute outage passes in no real time. The operator's side reads through ``FakeTrainingJobHook``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import LostContactError
from airflow_provider_disttrain.job.deadlines import Deadlines
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.operators.waiting import trigger_for
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
from airflow_provider_disttrain.utils.clock import LoopClock
from tests.unit.fakes import FakeTI, FakeTrainingJobHook, make_context, running_status, succeeded_status, with_hook
from tests.unit.triggers.helpers import job, run_once, started

pytestmark = pytest.mark.usefixtures("virtual_clock")

REF = JobRef("PyTorchJob", "train-abc", "ml", "uid-1")


def stored_trigger(apiserver: Any, wait_policy: WaitPolicy) -> TrainingJobTrigger:
    """The trigger the operator defers with, as the triggerer rebuilds it from its stored row."""
    made = trigger_for(
        REF,
        Deadlines(),
        wait_policy=wait_policy,
        cleanup_policy=CleanupPolicy(),
        stream_logs=False,
        gpus_per_replica={},
        connection=ClusterConnection(kubeconfig=apiserver.kubeconfig()),
    )
    _, kwargs = made.serialize()
    trigger = TrainingJobTrigger(**kwargs)
    # The watch's backoff cap: the outage's end is seen within a second.
    trigger.wait_policy = dataclasses.replace(trigger.wait_policy, poll_interval=1.0)
    return trigger


async def outage_during_the_wait(apiserver: Any, trigger: TrainingJobTrigger, seconds: float) -> dict[str, Any]:
    """Run ``trigger`` on a running job; the API server answers nothing but 503 for ``seconds``, then the job
    succeeds; the trigger's one event."""
    await apiserver.put(job(running_status()))
    task = asyncio.create_task(run_once(trigger, timeout=seconds + 600))
    while apiserver.open_watches < 1 and not task.done():
        await asyncio.sleep(0.01)
    await apiserver.outage(seconds)
    await apiserver.drop_watches()
    await asyncio.sleep(seconds + 1)
    await apiserver.put(job(succeeded_status()))
    return await task


async def test_a_15s_outage_in_deferred_mode_is_waited_out(apiserver: Any, virtual_clock: LoopClock) -> None:
    trigger = stored_trigger(apiserver, WaitPolicy(api_failure_tolerance=timedelta(seconds=30)))

    event = await outage_during_the_wait(apiserver, trigger, 15)

    assert event["status"] == "success"
    assert virtual_clock.monotonic() >= 15  # the event came after the outage


async def test_a_10_minute_outage_in_deferred_mode_is_waited_out_with_the_default_tolerance(apiserver: Any) -> None:
    """Longer than the 300 s the trigger used to tolerate, shorter than a control-plane upgrade's 15 minutes."""
    trigger = stored_trigger(apiserver, WaitPolicy())

    event = await outage_during_the_wait(apiserver, trigger, 600)

    assert event["status"] == "success"


async def test_an_outage_beyond_the_tolerance_in_deferred_mode_ends_as_lost_contact_and_keeps_the_job(
    apiserver: Any,
) -> None:
    trigger = stored_trigger(apiserver, WaitPolicy(api_failure_tolerance=timedelta(seconds=30)))
    await apiserver.put(job(running_status()))
    task = await started(trigger, apiserver)
    await apiserver.outage(3600)
    await apiserver.drop_watches()
    event = await task

    assert event["status"] == "lost_contact"
    assert "the job was last seen running" in event["message"]

    # The task resumes on its last try, with the cluster answering again: the job is not deleted.
    hook = FakeTrainingJobHook()
    hook.add_job(job(running_status()))
    operator = with_hook(
        TrainingJobOperator(task_id="train", image="trainer:1", num_workers=1, deferrable=True, retries=0), hook
    )
    with pytest.raises(LostContactError) as raised:
        operator.execute_complete(make_context(FakeTI()), event, job_uid="uid-1")

    assert "lost contact with the API server" in str(raised.value)
    assert "was NOT deleted" in str(raised.value)
    assert hook.called("delete_job") == []
    assert hook.job("train-abc", "ml") is not None
