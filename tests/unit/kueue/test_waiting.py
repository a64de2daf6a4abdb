"""The pure core of both Kueue waiters (``kueue.waiting``): what a Workload says, and what a visibility
answer means, whichever side (the worker's hook calls or the triggerer's watch) asked."""

from __future__ import annotations

from typing import Any

from airflow_provider_disttrain.kueue.estimate import WaitEstimate
from airflow_provider_disttrain.kueue.position import QueuePosition
from airflow_provider_disttrain.kueue.waiting import PositionBook, kueue_word, position_wanted


def workload(name: str = "wl-mine", **condition: str) -> dict[str, Any]:
    conditions = [{"type": kind, "status": status, "message": f"{kind} says so"} for kind, status in condition.items()]
    return {
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:05Z"},
        "status": {"conditions": conditions},
    }


def summary(*names: str) -> dict[str, Any]:
    items = [
        {"metadata": {"name": n}, "positionInLocalQueue": i, "positionInClusterQueue": i} for i, n in enumerate(names)
    ]
    return {"kind": "PendingWorkloadsSummary", "items": items}


def test_a_pending_workload_wants_its_position_and_an_admitted_one_does_not() -> None:
    assert position_wanted(workload(QuotaReserved="False")) == "wl-mine"
    assert position_wanted(workload(QuotaReserved="True", Admitted="True")) is None
    assert position_wanted(None) is None  # no Workload yet: nothing to place


def test_the_word_says_the_place_and_what_a_log_compares_leaves_out_the_time_waited() -> None:
    place = QueuePosition("user-queue", 1, 3, 2)
    early = kueue_word(workload(QuotaReserved="False"), place, waited=60)
    later = kueue_word(workload(QuotaReserved="False"), place, waited=600)

    assert early.message is not None and early.message.startswith("QuotaReserved says so; position 2 of 2")
    assert early.message.endswith("(60 s)") and later.message is not None and later.message.endswith("(10 min)")
    assert early.said == later.said == ("QuotaReserved says so", 1, 3)
    assert kueue_word(workload(Admitted="True"), None).message is None


def test_a_book_names_the_jobs_that_moved_and_warns_once_of_a_malformed_answer() -> None:
    book = PositionBook("team-a", "user-queue", refresh_seconds=30)
    assert book.due(0.0)
    book.asking(0.0)
    assert not book.due(29.0) and book.due(30.0)

    assert book.answered(summary("a", "b", "c"))[0] == {"a", "b", "c"}
    assert book.answered(summary("a", "c", "b"))[0] == {"b", "c"}
    malformed = {"items": 5}
    moved, warning = book.answered(malformed)
    assert moved == set() and warning is not None and "team-a/user-queue" in warning
    assert book.answered(malformed) == (set(), None)  # said once
    assert book.positions["b"].in_local_queue == 2  # the last good answer stands


def test_a_refusal_for_good_stops_the_asking_and_an_outage_does_not() -> None:
    book = PositionBook("team-a", "user-queue")
    assert book.failed(500, "etcd timeout") is None and book.due(0.0)
    warning = book.failed(403, "Forbidden")
    assert warning is not None and "localqueues/pendingworkloads" in warning
    assert not book.due(1e9)


def test_the_word_says_the_start_estimate_after_the_place_and_nothing_of_an_unplaced_one() -> None:
    place = QueuePosition("user-queue", 0, 2, 1)
    estimate = WaitEstimate(3, 900.0, "position 3 in ClusterQueue gpu-a; 6 admissions there ...: about 15 min")
    unplaced = WaitEstimate(None, None, "its place in the queue is not known")

    word = kueue_word(workload(QuotaReserved="False"), place, wait=estimate)
    quiet = kueue_word(workload(QuotaReserved="False"), None, wait=unplaced)

    assert word.message is not None and word.message.endswith(f"00:00:05 UTC; {estimate.describe()}")
    assert word.wait == estimate and word.said == ("QuotaReserved says so", 0, 2)  # the estimate is not compared
    assert quiet.message == "QuotaReserved says so" and quiet.wait == unplaced
    assert kueue_word(workload(Admitted="True"), None, wait=estimate).wait is None  # admitted: no wait
