"""The triggerer's shared Kueue queue positions (``hooks.queue_positions``), on virtual time: one request
per LocalQueue per interval however many triggers wait in it, a wake-up only for the jobs that moved,
and no request at all once the visibility API said it cannot answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_provider_disttrain.hooks.queue_positions import LocalQueuePositions, PositionRegistry
from airflow_provider_disttrain.utils.clock import LoopClock

pytestmark = pytest.mark.usefixtures("virtual_clock")


def summary(*names: str) -> dict[str, Any]:
    """A PendingWorkloadsSummary as Kueue v0.19 answers it: ``names`` in the order Kueue will admit them."""
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": "visibility.kueue.x-k8s.io/v1beta2",
        "items": [
            {
                "metadata": {"name": name, "namespace": "team-a"},
                "localQueueName": "user-queue",
                "positionInLocalQueue": index,
                "positionInClusterQueue": index + 2,  # two of another LocalQueue come first
                "priority": 0,
            }
            for index, name in enumerate(names)
        ],
    }


class Visibility:
    """Kueue's answers over time, and how many times it was asked."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked = 0

    async def __call__(self) -> dict[str, Any]:
        self.asked += 1
        answer = self.answers[min(self.asked, len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_a_thousand_waiting_triggers_cost_one_request_per_interval(virtual_clock: LoopClock) -> None:
    names = [f"wl-{i}" for i in range(1000)]
    visibility = Visibility(summary(*names), summary(*names[10:]))  # then the first ten were admitted
    queue = PositionRegistry(virtual_clock).queue("cluster", "team-a", "user-queue", visibility)
    events = {name: asyncio.Event() for name in names}
    for name, event in events.items():
        queue.follow(name, event)

    await virtual_clock.sleep(1)
    assert visibility.asked == 1
    assert all(event.is_set() for event in events.values())  # each learns its position
    for event in events.values():
        event.clear()
    first, last = queue.position("wl-10"), queue.position("wl-999")
    assert first is not None and (first.in_local_queue, first.cluster_queue_position) == (10, 12)
    assert (
        last is not None
        and last.describe() == "position 1000 of 1000 in LocalQueue 'user-queue' (1002 in its ClusterQueue)"
    )

    await virtual_clock.sleep(30 * 10)  # ten intervals
    assert visibility.asked == 11  # not 11,000
    moved = [name for name, event in events.items() if event.is_set()]
    assert len(moved) == 1000  # everyone moved up by ten (the first ten left the queue)
    assert queue.position("wl-10") is not None and queue.position("wl-10").in_local_queue == 0
    assert queue.position("wl-0") is None


async def test_only_the_jobs_whose_place_changed_are_woken(virtual_clock: LoopClock) -> None:
    visibility = Visibility(summary("a", "b", "c"), summary("a", "c", "b"))
    queue = LocalQueuePositions("team-a", "user-queue", visibility, virtual_clock, refresh_seconds=30)
    events = {name: asyncio.Event() for name in "abc"}
    for name, event in events.items():
        queue.follow(name, event)
    await virtual_clock.sleep(1)
    for event in events.values():
        event.clear()

    await virtual_clock.sleep(30)

    assert {name for name, event in events.items() if event.is_set()} == {"b", "c"}


async def test_without_permission_it_says_so_once_and_never_asks_again(
    virtual_clock: LoopClock, caplog: pytest.LogCaptureFixture
) -> None:
    visibility = Visibility(ApiException(status=403, reason="Forbidden"))
    registry = PositionRegistry(virtual_clock)
    queue = registry.queue("cluster", "team-a", "user-queue", visibility)
    first, second = asyncio.Event(), asyncio.Event()
    queue.follow("a", first)
    await virtual_clock.sleep(100)
    queue.unfollow(first)
    # A trigger that comes later for the same LocalQueue does not ask (or warn) again.
    again = registry.queue("cluster", "team-a", "user-queue", visibility)
    again.follow("b", second)
    await virtual_clock.sleep(100)

    assert again is queue and visibility.asked == 1
    assert queue.position("a") is None
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "localqueues/pendingworkloads" in warnings[0]


async def test_an_outage_keeps_the_last_answer_and_asks_again_next_interval(virtual_clock: LoopClock) -> None:
    visibility = Visibility(summary("a", "b"), ApiException(status=500, reason="etcd timeout"), summary("b"))
    queue = LocalQueuePositions("team-a", "user-queue", visibility, virtual_clock, refresh_seconds=30)
    queue.follow("b", asyncio.Event())
    await virtual_clock.sleep(1)
    assert queue.position("b") is not None and queue.position("b").in_local_queue == 1

    await virtual_clock.sleep(30)  # the outage: the last answer stands
    assert visibility.asked == 2 and queue.position("b").in_local_queue == 1
    await virtual_clock.sleep(30)
    assert visibility.asked == 3 and queue.position("b").in_local_queue == 0


async def test_the_last_trigger_leaving_stops_the_requests_and_forgets_the_queue(virtual_clock: LoopClock) -> None:
    visibility = Visibility(summary("a"))
    registry = PositionRegistry(virtual_clock)
    queue = registry.queue("cluster", "team-a", "user-queue", visibility)
    event = asyncio.Event()
    queue.follow("a", event)
    await virtual_clock.sleep(45)
    queue.unfollow(event)
    asked = visibility.asked

    await virtual_clock.sleep(300)

    assert visibility.asked == asked == 2
    assert registry.queues == {}


MALFORMED_ANSWERS = {
    "items not a list": {"kind": "PendingWorkloadsSummary", "items": 5},
    "metadata not an object": {"items": [{"metadata": "b", "positionInLocalQueue": 0}]},
    "position not an integer": {"items": [{"metadata": {"name": "b"}, "positionInLocalQueue": "first"}]},
    "item not an object": {"items": ["b"]},
}


@pytest.mark.parametrize("malformed", MALFORMED_ANSWERS.values(), ids=MALFORMED_ANSWERS.keys())
async def test_a_malformed_answer_is_logged_once_and_skipped_and_the_poller_goes_on(
    virtual_clock: LoopClock, caplog: pytest.LogCaptureFixture, malformed: dict[str, Any]
) -> None:
    visibility = Visibility(summary("a", "b"), malformed, malformed, summary("b"))
    queue = LocalQueuePositions("team-a", "user-queue", visibility, virtual_clock, refresh_seconds=30)
    moved = asyncio.Event()
    queue.follow("b", moved)
    await virtual_clock.sleep(1)
    assert queue.position("b") is not None and queue.position("b").in_local_queue == 1
    moved.clear()

    await virtual_clock.sleep(60)  # two malformed answers: the last good one stands
    assert visibility.asked == 3 and queue.position("b").in_local_queue == 1
    assert not moved.is_set()
    await virtual_clock.sleep(30)  # still polling: the next good answer is taken
    assert visibility.asked == 4 and queue.position("b").in_local_queue == 0
    assert moved.is_set()

    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "team-a/user-queue" in warnings[0] and "not a PendingWorkloadsSummary" in warnings[0]


@pytest.mark.parametrize("body", [b"<html>502 Bad Gateway</html>", b"[1, 2]", b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_is_a_malformed_answer(body: bytes) -> None:
    from airflow_provider_disttrain.kueue.position import MalformedAnswer, parse_summary

    with pytest.raises(MalformedAnswer):
        parse_summary(body)
