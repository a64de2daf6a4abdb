"""Where a queued job stands, read from Kueue's visibility API answer (``PendingWorkloadsSummary``).

The poller that asks once per LocalQueue for all its waiters is tested in hooks/test_queue_positions.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.kueue.position import MalformedAnswer, QueuePosition, pending_workloads_path, positions


def pending(name: str, local: int | None, cluster: int | None) -> dict[str, Any]:
    item: dict[str, Any] = {"metadata": {"name": name, "namespace": "ml"}}
    if local is not None:  # Kueue leaves a zero position out (omitempty)
        item["positionInLocalQueue"] = local
    if cluster is not None:
        item["positionInClusterQueue"] = cluster
    return item


def test_the_path_is_the_local_queues_pending_workloads_in_the_visibility_api() -> None:
    assert pending_workloads_path("ml", "user-queue") == (
        "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/ml/localqueues/user-queue/pendingworkloads"
    )


def test_each_pending_workload_gets_its_place_and_an_omitted_position_is_zero() -> None:
    found = positions("user-queue", {"items": [pending("first", None, None), pending("second", 1, 6)]})

    assert found == {
        "first": QueuePosition("user-queue", 0, 0, 2),
        "second": QueuePosition("user-queue", 1, 6, 2),
    }


def test_an_empty_queue_has_no_positions() -> None:
    assert positions("user-queue", {}) == {}
    assert positions("user-queue", {"items": []}) == {}


@pytest.mark.parametrize(
    ("summary", "words"),
    [
        ({"items": {"a": 1}}, "items is dict, not a list"),
        ({"items": [{"metadata": {}}]}, "item 0 has no metadata.name"),
        ({"items": ["a name"]}, "item 0 has no metadata.name"),
        ({"items": [pending("w", -1, 0)]}, "positionInLocalQueue is -1"),
        ({"items": [pending("w", 0, True)]}, "positionInClusterQueue is True"),
        ({"items": [pending("w", "3", 0)]}, "positionInLocalQueue is '3'"),
    ],
)
def test_an_answer_that_does_not_fit_is_refused_whole_naming_what(summary: dict[str, Any], words: str) -> None:
    with pytest.raises(MalformedAnswer, match=words):
        positions("user-queue", summary)


def test_a_position_is_told_counting_from_one_with_when_it_was_queued() -> None:
    place = QueuePosition("user-queue", in_local_queue=2, cluster_queue_position=6, pending_in_local_queue=5)

    assert place.describe() == "position 3 of 5 in LocalQueue 'user-queue' (7 in its ClusterQueue)"
    assert place.describe(since="2024-05-01T09:12:03Z", waited_seconds=780) == (
        "position 3 of 5 in LocalQueue 'user-queue' (7 in its ClusterQueue); queued since 2024-05-01 09:12:03 UTC"
        " (13 min)"
    )
    assert place.describe(since="not a time").endswith("(7 in its ClusterQueue)")


@pytest.mark.parametrize(("seconds", "told"), [(-5, "0 s"), (45, "45 s"), (600, "10 min"), (3 * 3600, "3.0 h")])
def test_the_wait_is_told_in_a_unit_a_reader_takes_in(seconds: float, told: str) -> None:
    place = QueuePosition("q", 0, 0, 1)

    assert place.describe(since="2024-05-01T09:12:03Z", waited_seconds=seconds).endswith(f"({told})")
