"""A worker's reads of Kueue's queue positions (``hooks.kueue.QueuePositionReader``): at most one request
per refresh interval on the injected clock (the one ``Clock``, here the tests' ``ManualClock``), and
none after the visibility API said it cannot answer."""

from __future__ import annotations

from typing import Any

import pytest
import structlog
from kubernetes.client.exceptions import ApiException

from airflow_provider_disttrain.hooks.kueue import QueuePositionReader
from tests.unit.fakes import FakeTrainingJobHook, ManualClock


def pending(name: str, created: str, admitted: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Admitted", "status": "True"}] if admitted else []
    return {
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": created},
        "status": {"conditions": conditions},
    }


def test_positions_are_read_once_per_interval_however_often_the_waiter_polls() -> None:
    hook = FakeTrainingJobHook()
    hook.workloads = [pending("wl-first", "2026-01-01T00:00:00Z"), pending("wl-mine", "2026-01-01T00:00:05Z")]
    clock = ManualClock(0.0)
    reader = QueuePositionReader(hook, structlog.get_logger(), refresh_seconds=30, clock=clock)

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
    clock = ManualClock(0.0)
    reader = QueuePositionReader(hook, structlog.get_logger(), refresh_seconds=30, clock=clock)

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
    reader = QueuePositionReader(hook, structlog.get_logger(), clock=ManualClock(0.0))

    with pytest.raises(ApiException) as raised:  # for the waiter's own retry handling
        reader.position("team-a", "user-queue", "wl-mine")

    assert raised.value.status == 500
    assert reader.unavailable is False


class AnsweringHook:
    """A hook whose visibility API answers ``answers`` in turn (the last one again after that)."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = list(answers)
        self.asked = 0

    def list_workloads(self, namespace: str) -> list[dict[str, Any]]:
        return []  # no admission history: the positions are what this hook is about

    def pending_workloads(self, namespace: str, local_queue: str) -> dict[str, Any]:
        self.asked += 1
        return self.answers[min(self.asked, len(self.answers)) - 1]


def positioned(*names: str) -> dict[str, Any]:
    items = [
        {"metadata": {"name": name}, "positionInLocalQueue": i, "positionInClusterQueue": i}
        for i, name in enumerate(names)
    ]
    return {"kind": "PendingWorkloadsSummary", "items": items}


def test_a_malformed_answer_is_skipped_with_one_warning_not_raised_into_the_wait() -> None:
    malformed = {"items": [{"metadata": {"name": "wl-mine"}, "positionInLocalQueue": "second"}]}
    hook = AnsweringHook(positioned("wl-first", "wl-mine"), malformed, malformed, positioned("wl-mine"))
    clock = ManualClock(0.0)
    reader = QueuePositionReader(hook, structlog.get_logger(), refresh_seconds=30, clock=clock)

    seen = []
    with structlog.testing.capture_logs() as logs:
        for second in (0, 30, 60, 90):
            clock.now = float(second)
            found = reader.position("team-a", "user-queue", "wl-mine")
            seen.append(found.in_local_queue if found else None)

    assert hook.asked == 4
    assert seen == [1, 1, 1, 0]  # the last good answer stands until the next one
    warnings = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1 and "team-a/user-queue" in warnings[0]
