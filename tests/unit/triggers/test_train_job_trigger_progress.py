"""The deferred task's progress lines show what a TrainJob's trainer reported (``trainerStatus``), as each
report comes through the shared watch of ``trainjobs``; the success event carries the last report."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import MutableMapping
from typing import Any

import pytest
import structlog

from tests.unit.triggers.helpers import run_once
from tests.unit.triggers.test_train_job_trigger import make_trigger, train_job

pytestmark = pytest.mark.usefixtures("virtual_clock")

TITLE = "TrainJob ml/tj-1"


async def lines_after(logs: list[MutableMapping[str, Any]], count: int) -> list[str]:
    """The trigger's progress lines for the job (without its title), once there are ``count`` of them."""
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        said = [str(e["event"]) for e in logs if e["log_level"] == "info"]  # formatted: the lines hold "%"
        lines = [line.removeprefix(f"{TITLE}: ") for line in said if line.startswith(f"{TITLE}: ")]
        if len(lines) >= count:
            return lines
        assert asyncio.get_running_loop().time() < deadline, lines
        await asyncio.sleep(0.02)


async def test_each_report_of_the_trainer_is_a_progress_line_and_the_event_carries_the_last(
    apiserver: Any,
) -> None:
    with structlog.testing.capture_logs() as logged:
        await a_trainjob_reporting_its_progress(apiserver, logged)


async def a_trainjob_reporting_its_progress(apiserver: Any, logged: list[MutableMapping[str, Any]]) -> None:
    reporting = train_job("running-progress")
    await apiserver.put(reporting, plural="trainjobs")
    task = asyncio.create_task(run_once(make_trigger(apiserver)))
    first = await lines_after(logged, 1)
    assert first[0].endswith("| trainer 40 %, about 2 min 30 s left, loss=0.4172 eval_accuracy=0.8125 epoch=2")

    later = copy.deepcopy(reporting)
    later["status"]["trainerStatus"].update(
        progressPercentage=70,
        estimatedRemainingSeconds=65,
        metrics=[{"name": "loss", "value": "0.2"}],
        lastUpdatedTime="2026-12-02T07:39:20Z",
    )
    await apiserver.put(later, plural="trainjobs")
    second = await lines_after(logged, 2)
    assert second[1].endswith("| trainer 70 %, about 1 min 05 s left, loss=0.2")

    await apiserver.put(train_job("complete-progress"), plural="trainjobs")
    event = await task

    assert event["status"] == "success"
    final = (await lines_after(logged, 3))[-1]
    assert final.endswith("| trainer 100 %, about 0 s left, loss=0.0831 eval_accuracy=0.9612 epoch=3")
    assert event["job"]["trainer_status"]["metrics"] == {"loss": 0.0831, "eval_accuracy": 0.9612, "epoch": 3}
