"""The trigger writes progress lines to its log while it waits (Airflow 3 shows them in the task log).

The trigger runs for real against the fake API server (see test_training_job.py); the job's changes
come through the shared watch, and no request is added for the lines.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.job.progress import ProgressTracker
from tests.unit.fakes import condition, queued_status, running_status, succeeded_status, suspended_status
from tests.unit.triggers.helpers import job, make_trigger, started

# Trigger and watch stories run on virtual time (tests/unit/conftest.py: virtual_clock).
pytestmark = pytest.mark.usefixtures("virtual_clock")

TITLE = "PyTorchJob ml/train-abc"


@pytest.fixture
def logged() -> Iterator[list[MutableMapping[str, Any]]]:
    """What the trigger logs through its structlog logger (``BaseTrigger.log``), as event dicts."""
    with structlog.testing.capture_logs() as logs:
        yield logs


def progress_lines(logged: list[MutableMapping[str, Any]]) -> list[str]:
    said = [str(e["event"]) % tuple(e.get("positional_args", ())) for e in logged if e["log_level"] == "info"]
    return [line for line in said if line.startswith(f"{TITLE}: ")]


async def wait_for_lines(logged: list[MutableMapping[str, Any]], count: int, timeout: float = 5.0) -> list[str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while len(progress_lines(logged)) < count:
        assert asyncio.get_running_loop().time() < deadline, progress_lines(logged)
        await asyncio.sleep(0.02)
    return progress_lines(logged)


async def test_each_change_seen_by_the_watch_is_one_line(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    await apiserver.put(job(queued_status()))
    task = await started(make_trigger(apiserver), apiserver)
    await wait_for_lines(logged, 1)

    await apiserver.put(job(running_status(workers=2)))
    await wait_for_lines(logged, 2)
    await apiserver.put(job(succeeded_status(workers=2)))
    event = await task

    assert event["status"] == "success"
    lines = [line.removeprefix(f"{TITLE}: ") for line in progress_lines(logged)]
    assert [line.split(" ", 1)[0] for line in lines] == ["queued", "running", "succeeded"]
    assert "replicas Master: 1 active; Worker: 2 active" in lines[1]
    assert "replicas Master: 1 succeeded; Worker: 2 succeeded" in lines[2]
    # The lines come from the watch's events: one LIST, one WATCH, no GET.
    assert (apiserver.count("list"), apiserver.count("watch"), apiserver.count("get")) == (1, 1, 0)


async def test_a_flapping_job_is_throttled_and_the_held_line_written_when_due(
    apiserver: Any, logged: list[MutableMapping[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import airflow_provider_disttrain.triggers.training_job as trigger_module

    monkeypatch.setattr(trigger_module, "ProgressTracker", lambda **_: ProgressTracker(interval=0.5, burst=1))
    await apiserver.put(job(suspended_status()))
    task = await started(make_trigger(apiserver), apiserver)
    await wait_for_lines(logged, 1)

    for second in range(20):  # 20 restarts within 0.2 s
        status = running_status(workers=2)
        at = f"2024-05-01T11:00:{second:02d}Z"
        status["conditions"] = [condition("Created", at), condition("Restarting", at, reason="PyTorchJobRestarting")]
        await apiserver.put(job(status))
        await asyncio.sleep(0.01)
    # The job then stays quiet: the held-back line is still written, once its turn comes.
    lines = await wait_for_lines(logged, 2, timeout=3.0)
    await asyncio.sleep(0.8)
    assert len(progress_lines(logged)) == 2, progress_lines(logged)
    # Each restart the watch delivered is counted (all 20 unless the loop was slower than the puts).
    assert 2 <= int(re.search(r"restarts seen: (\d+)", lines[1]).group(1)) <= 20
    assert "changes since the last line" in lines[1]

    await apiserver.put(job(succeeded_status(workers=2)))
    assert (await task)["status"] == "success"
    assert progress_lines(logged)[-1].startswith(f"{TITLE}: succeeded")  # the end is never held back


async def test_the_progress_interval_it_was_given_paces_the_lines_after_the_burst(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    await apiserver.put(job(queued_status()))
    task = await started(make_trigger(apiserver, progress_interval=40.0), apiserver)
    await wait_for_lines(logged, 1)
    for workers in (1, 2):  # the rest of the burst of three
        await apiserver.put(job(running_status(workers=workers)))
        await wait_for_lines(logged, 1 + workers)
    started_at = asyncio.get_running_loop().time()

    await apiserver.put(job(running_status(workers=3)))
    await wait_for_lines(logged, 4, timeout=60.0)

    # Held until a token came back: 40 s on the trigger's clock, less what refilled during the burst.
    waited = asyncio.get_running_loop().time() - started_at
    assert 30.0 < waited <= 41.0, waited
    assert "Worker: 3 active" in progress_lines(logged)[3]
    await apiserver.put(job(succeeded_status(workers=3)))
    assert (await task)["status"] == "success"
