"""A worker's reads of Kueue's queue positions (``hooks.kueue.QueuePositionReader``): at most one request
per refresh interval on the injected clock, and none after the visibility API said it cannot answer."""

from __future__ import annotations

from typing import Any

import pytest
import structlog
from kubernetes.client.exceptions import ApiException

from airflow_provider_disttrain.hooks.kueue import QueuePositionReader
from tests.unit.fakes import FakeTrainingJobHook


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pending(name: str, created: str, admitted: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Admitted", "status": "True"}] if admitted else []
    return {
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": created},
        "status": {"conditions": conditions},
    }


def test_positions_are_read_once_per_interval_however_often_the_waiter_polls() -> None:
    hook = FakeTrainingJobHook()
    hook.workloads = [pending("wl-first", "2026-01-01T00:00:00Z"), pending("wl-mine", "2026-01-01T00:00:05Z")]
    clock = Clock()
    reader = QueuePositionReader(hook, structlog.get_logger(), refresh_seconds=30, monotonic=clock)

    seen = []
    for second in range(0, 61, 5):  # a waiter polling every 5 s for a minute
        clock.now = float(second)
        if second == 20:
            hook.workloads = hook.workloads[1:]  # the first one was admitted: mine moves up
        seen.append(reader.position("team-a", "user-queue", "wl-mine"))

    assert len(hook.called("pending_workloads")) == 3  # at 0, 30 and 60 s
    assert [p.in_local_queue for p in seen if p] == [1] * 6 + [0] * 7  # the move is seen at the next read
    assert seen[-1] is not None
    assert seen[-1].describe(since="2026-01-01T00:00:05Z", waited_seconds=754) == (
        "position 1 of 1 in LocalQueue 'user-queue' (1 in its ClusterQueue); queued since 2026-01-01 00:00:05 UTC "
        "(13 min)"
    )


def test_without_permission_the_reader_says_so_once_and_asks_no_more() -> None:
    hook = FakeTrainingJobHook()
    hook.visibility_error = ApiException(status=403, reason="Forbidden")
    clock = Clock()
    reader = QueuePositionReader(hook, structlog.get_logger(), refresh_seconds=30, monotonic=clock)

    with structlog.testing.capture_logs() as logs:
        for second in (0, 30, 60, 90):
            clock.now = float(second)
            assert reader.position("team-a", "user-queue", "wl-mine") is None

    assert len(hook.called("pending_workloads")) == 1
    warnings = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1
    assert "localqueues/pendingworkloads" in warnings[0] and "team-a/user-queue" in warnings[0]


def test_an_outage_of_the_api_server_is_raised_not_taken_for_a_missing_permission() -> None:
    hook = FakeTrainingJobHook()
    hook.visibility_error = ApiException(status=500, reason="Internal Server Error")
    reader = QueuePositionReader(hook, structlog.get_logger(), monotonic=Clock())

    with pytest.raises(ApiException) as raised:  # for the waiter's own retry handling
        reader.position("team-a", "user-queue", "wl-mine")

    assert raised.value.status == 500
    assert reader.unavailable is False
