"""A wait cancelled in the very turn of the loop in which what it waited for arrives is still cancelled.

Python 3.11's ``asyncio.wait_for`` returned the arrived value and dropped such a cancellation (CPython
gh-86296): a pod watch cancelled as a pod event came read on for good, and the trigger waiting for it to
end never sent its event (seen on the local two-cluster environment). These tests make that turn happen
on purpose: the line arrives, and the waiting task is cancelled, before the loop runs either.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.pods import pod_watch
from airflow_provider_disttrain.pods.pod_watch import PodWatchTask
from airflow_provider_disttrain.utils.timeouts import cancel_and_wait, next_line
from tests.unit.fakes import make_pod


class LineStream:
    """``response.content`` of a watch: each ``readline()`` waits until the test hands it a line."""

    def __init__(self) -> None:
        self.pending: asyncio.Future[bytes] | None = None
        self.asked = asyncio.Event()

    async def readline(self) -> bytes:
        self.pending = asyncio.get_running_loop().create_future()
        self.asked.set()
        return await self.pending

    async def hand(self, line: bytes) -> None:
        """Wait for a reader, then give it ``line`` (the reader runs only at the loop's next turn)."""
        await self.asked.wait()
        self.asked.clear()
        assert self.pending is not None
        self.pending.set_result(line)


async def test_a_wait_for_a_line_cancelled_as_the_line_arrives_is_cancelled() -> None:
    stream = LineStream()
    reader = asyncio.create_task(next_line(stream, 60))
    await stream.hand(b"{}\n")
    reader.cancel()  # the same turn: the line is there and the cancellation too

    with pytest.raises(asyncio.CancelledError):
        await reader


async def test_a_trigger_cancelled_as_its_job_changes_stops_waiting() -> None:
    from airflow_provider_disttrain.hooks.shared_watch import Subscription

    subscription = Subscription(watch=None, name="train", watch_timeout=300, poll_interval=10)  # type: ignore[arg-type]
    waiting = asyncio.create_task(subscription.wait(60))
    await asyncio.sleep(0)
    subscription.notify()  # the shared watch saw the job change ...
    waiting.cancel()  # ... as the triggerer cancelled the trigger (cleared, marked failed)

    with pytest.raises(asyncio.CancelledError):
        await waiting


class _Response:
    status = 200

    def __init__(self, stream: LineStream) -> None:
        self.content = stream

    def release(self) -> None:
        pass


class _Cluster:
    """A ``ClusterClient`` whose pods API answers every watch with ``stream``."""

    def __init__(self, stream: LineStream) -> None:
        self.stream = stream

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[tuple[Any, int]]:
        yield object(), 1


async def test_a_pod_watch_cancelled_as_a_pod_event_arrives_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes_asyncio import client as async_client

    stream = LineStream()

    class CoreV1Api:
        def __init__(self, api: Any) -> None:
            pass

        async def list_namespaced_pod(self, namespace: str, **options: Any) -> _Response:
            return _Response(stream)

    monkeypatch.setattr(async_client, "CoreV1Api", CoreV1Api)
    monkeypatch.setattr(pod_watch, "HEALTHY_WATCH_SECONDS", 0)
    watch = PodWatchTask(get_job_kind("PyTorchJob"), "train", "ml", "PyTorchJob ml/train")
    task = asyncio.create_task(watch.run(_Cluster(stream)))  # type: ignore[arg-type]
    event = {"type": "DELETED", "object": make_pod("train", "master", 0, phase="Succeeded")}
    await stream.hand(json.dumps(event).encode() + b"\n")
    task.cancel()  # the pod event and the trigger's ending in one turn of the loop

    done, _ = await asyncio.wait({task}, timeout=30)
    assert task in done, "the cancelled pod watch read on instead of ending"
    assert task.cancelled()


async def test_an_ending_waits_a_bounded_time_for_a_task_that_ignores_its_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        ended = await cancel_and_wait(task, "Watching the pods of PyTorchJob ml/train", logging.getLogger("t"), 0.5)

    assert not ended and not task.done()
    assert "Watching the pods of PyTorchJob ml/train did not stop within 0.5s of being cancelled" in caplog.text
    release.set()
    await task


async def test_an_ending_waits_for_a_task_that_honours_its_cancellation() -> None:
    task = asyncio.create_task(asyncio.Event().wait())
    await asyncio.sleep(0)

    assert await cancel_and_wait(task, "waiting", logging.getLogger("t"))
    assert task.cancelled()
