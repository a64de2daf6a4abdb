"""Live logs (``live_logs``) against the fake API server: clock skew, over-long lines, control characters.

The trigger runs for real, as in ``tests/unit/triggers/test_training_job_logs.py``, whose helpers these
stories share.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_disttrain.pods.live_logs import LOG_POSITION_ANNOTATION, bounded_lines, encode_position
from airflow_provider_disttrain.pods.logs import LogCursor
from tests.unit.fakes import make_pod, running_status, succeeded_status
from tests.unit.triggers import test_training_job_logs as follower_stories
from tests.unit.triggers.helpers import job, make_trigger, started
from tests.unit.waiting import until

pytestmark = pytest.mark.usefixtures("virtual_clock")

NAMESPACE, MASTER, said = follower_stories.NAMESPACE, follower_stories.MASTER, follower_stories.said
logged = follower_stories.logged  # the fixture capturing the trigger's log


def rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeClockAhead:
    """The kubelet's clock, ``ahead`` seconds ahead of the triggerer's."""

    def __init__(self, clock: Any, ahead: float) -> None:
        self.clock, self.ahead = clock, ahead

    def wall(self) -> float:
        return self.clock.wall() + self.ahead

    def monotonic(self) -> float:
        return self.clock.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.clock.sleep(seconds)


async def run_to_the_end(
    apiserver: Any, *, last_line: tuple[list[MutableMapping[str, Any]], str] | None = None, **trigger_kwargs: Any
) -> None:
    """Run the trigger until the log is written out (and, given ``last_line`` as ``(logged, line)``, until
    the trigger has said that line), then let the job succeed. The server closing the stream is not the
    trigger having read it: a trigger ended by the job's success stops reading (the task's final copy
    adds the rest), so a story about what the live log shows waits for its last line first."""
    task = await started(make_trigger(apiserver, stream_logs=True, **trigger_kwargs), apiserver)
    await until(lambda: apiserver.open_log_streams == 0 and bool(apiserver.queries("log")))
    if last_line is not None:
        events, line = last_line
        # Reading megabytes is real I/O: loop time runs on meanwhile, so the bound is generous.
        await until(lambda: said(events)[-1:] == [line], within=3600)
    await apiserver.put(job(succeeded_status()))
    assert (await task)["status"] == "success"


async def test_a_node_clock_ahead_of_the_triggerers_loses_no_line_after_a_restart(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    apiserver.clock = NodeClockAhead(apiserver.clock, ahead=120.0)
    apiserver.add_pod(make_pod("train-abc", "master", 0, namespace=NAMESPACE))
    node_now = datetime.fromtimestamp(apiserver.clock.wall(), timezone.utc)
    written, missed = node_now - timedelta(seconds=10), node_now - timedelta(seconds=5)
    await apiserver.add_log_lines(NAMESPACE, MASTER, f"{rfc3339(written)} written before the restart")
    await apiserver.add_log_lines(NAMESPACE, MASTER, f"{rfc3339(missed)} written while no trigger ran")
    await apiserver.end_log(NAMESPACE, MASTER)
    running = job(running_status())
    position = LogCursor(int(written.timestamp()) * 10**9 + written.microsecond * 1000, 1)
    running["metadata"]["annotations"] = {LOG_POSITION_ANNOTATION: encode_position(MASTER, position)}
    await apiserver.put(running)

    await run_to_the_end(apiserver, last_line=(logged, "written while no trigger ran"))

    assert said(logged) == ["written while no trigger ran"]


async def test_a_line_longer_than_any_buffer_is_cut_and_the_lines_after_it_follow(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    apiserver.add_pod(make_pod("train-abc", "master", 0, namespace=NAMESPACE))
    start = datetime.now(timezone.utc) - timedelta(seconds=5)
    progress = "".join(f"\rstep {i:7d}/9999999 [{'#' * 40}]" for i in range(100_000))  # 5.4 MB, no newline
    await apiserver.add_log_lines(
        NAMESPACE,
        MASTER,
        f"{rfc3339(start)} before",
        f"{rfc3339(start + timedelta(milliseconds=1))} {progress}",
        f"{rfc3339(start + timedelta(milliseconds=2))} after",
    )
    await apiserver.end_log(NAMESPACE, MASTER)
    await apiserver.put(job(running_status()))

    await run_to_the_end(apiserver, last_line=(logged, "after"), stream_logs_bytes_per_second=1_000_000)

    lines = said(logged)
    assert lines[0] == "before"
    assert lines[-1] == "after"
    assert len(lines) == 3
    assert lines[1].startswith("step ") and lines[1].endswith(" [line cut]")  # the last frame read, cut
    assert len(apiserver.queries("log")) == 1  # one stream: no failure, no retry


async def test_terminal_control_sequences_never_reach_the_task_log(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    apiserver.add_pod(make_pod("train-abc", "master", 0, namespace=NAMESPACE))
    start = datetime.now(timezone.utc) - timedelta(seconds=5)
    await apiserver.add_log_lines(
        NAMESPACE, MASTER, f"{rfc3339(start)} \x1b[31mloss\x1b[0m=0.5\x07\tlr=\x1b]0;title\x07\x9b0.1"
    )
    await apiserver.end_log(NAMESPACE, MASTER)
    await apiserver.put(job(running_status()))

    await run_to_the_end(apiserver, last_line=(logged, "loss=0.5\tlr=0.1"))

    assert said(logged) == ["loss=0.5\tlr=0.1"]


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ((b"a\nb", b"c\n", b"d"), [b"a", b"bc", b"d"]),
        ((b"x" * 5, b"xxxx\nnext\n"), [b"xxxx [line cut]", b"next"]),
        ((b"x" * 4, b"\nab\n"), [b"xxxx", b"ab"]),
        ((b"", b"\n\n"), [b"", b""]),
    ],
    ids=["split-across-chunks", "cut-then-skipped", "exactly-the-limit", "empty-lines"],
)
async def test_bounded_lines(parts: tuple[bytes, ...], expected: list[bytes]) -> None:
    assert [line async for line in bounded_lines(chunks(*parts), limit=4)] == expected
