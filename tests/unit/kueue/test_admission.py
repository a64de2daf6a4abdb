"""``kueue_admission``: which of Kueue's words are final, read from Workloads, LocalQueues and ClusterQueues
captured from the real Kueue of the local cluster (``tests/fixtures/workloads/<version>``, written by its
``capture.py``): v0.17.0, and v0.19.2 with ``UnadmittedWorkloadsObservability`` as the local cluster runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_disttrain.kueue.admission import (
    NEVER_ADMITTED,
    UNREADABLE,
    WAITING,
    cluster_queue_problem,
    never_admitted,
    queue_problem,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "workloads"
V017, V019 = "v0.17.0", "v0.19.2"


def load(version: str, name: str) -> dict[str, Any]:
    return yaml.safe_load((FIXTURES / version / f"{name}.yaml").read_text())


def quota_reason(workload: dict[str, Any]) -> str:
    return next(c["reason"] for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved")


# -- the Workload: final or not -----------------------------------------------------------------------------

# (version, situation) -> Kueue's reason, and whether the provider stops waiting.
WORKLOADS = {
    (V017, "waiting-for-quota"): ("Pending", False),
    (V017, "exceeds-max-quota"): ("Pending", False),  # v0.17 says no more: waits for queue_timeout
    (V017, "no-matching-flavor"): ("Pending", False),
    (V017, "local-queue-missing"): ("Inadmissible", True),
    (V017, "cluster-queue-stopped"): ("Inadmissible", True),
    (V019, "waiting-for-quota"): ("WaitingForQuota", False),
    (V019, "exceeds-max-quota"): ("ExceedsMaxQuota", True),
    (V019, "no-matching-flavor"): ("NoMatchingFlavor", True),
    (V019, "local-queue-missing"): ("Misconfigured", True),
    (V019, "cluster-queue-stopped"): ("Suspended", True),
}


@pytest.mark.parametrize(("version", "situation"), sorted(WORKLOADS), ids=lambda value: str(value))
def test_a_captured_workload_is_final_exactly_when_its_reason_is_in_the_table(version: str, situation: str) -> None:
    workload = load(version, situation)
    reason, final = WORKLOADS[(version, situation)]
    assert quota_reason(workload) == reason  # what the real Kueue wrote
    verdict = never_admitted(workload)
    assert (verdict is not None) is final
    if verdict is not None:
        message = next(c["message"] for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved")
        assert (verdict.reason, verdict.message, verdict.meaning) == (reason, message, NEVER_ADMITTED[reason])
        assert verdict.describe() == f"Kueue can never admit it ({reason}: {NEVER_ADMITTED[reason]}): {message}"


@pytest.mark.parametrize("version", [V017, V019])
def test_an_admitted_workload_is_never_final(version: str) -> None:
    assert never_admitted(load(version, "admitted")) is None


def test_kueues_own_words_say_why_in_each_version() -> None:
    assert "> maximum capacity (1)" in str(never_admitted(load(V019, "exceeds-max-quota")))
    assert "doesn't match" in str(never_admitted(load(V019, "no-matching-flavor")))
    assert "LocalQueue does-not-exist" in str(never_admitted(load(V017, "local-queue-missing")))
    assert "LocalQueue does-not-exist" in str(never_admitted(load(V019, "local-queue-missing")))


def test_no_workload_and_a_workload_kueue_has_not_judged_wait_on() -> None:
    assert never_admitted(None) is None
    assert never_admitted({"metadata": {"name": "w"}, "status": {}}) is None


def test_a_final_reason_on_a_reserved_or_admitted_workload_does_not_count() -> None:
    workload = load(V019, "exceeds-max-quota")
    for c in workload["status"]["conditions"]:
        if c["type"] == "QuotaReserved":
            c["status"] = "True"
    assert never_admitted(workload) is None


def test_the_final_and_the_waiting_reasons_are_apart() -> None:
    assert not set(NEVER_ADMITTED) & set(WAITING)
    assert {"ExceedsMaxQuota", "NoMatchingFlavor"} <= set(NEVER_ADMITTED)
    assert {"WaitingForQuota", "TopologyPlacementFailed", "WaitingForPodsReady"} <= set(WAITING)


# -- the LocalQueue, before submitting ----------------------------------------------------------------------


@pytest.mark.parametrize("version", [V017, V019])
def test_an_active_local_queue_of_an_active_cluster_queue_may_admit(version: str) -> None:
    local_queue, cluster_queue = load(version, "localqueue-active"), load(version, "clusterqueue-active")
    assert queue_problem("ns", "open", local_queue, cluster_queue) is None
    assert queue_problem("ns", "open", local_queue) is None  # the ClusterQueue unreadable


@pytest.mark.parametrize("version", [V017, V019])
def test_a_missing_local_queue_is_said_so(version: str) -> None:
    assert queue_problem("team-a", "nope", None) == "LocalQueue nope doesn't exist in namespace team-a"


@pytest.mark.parametrize("version", [V017, V019])
def test_a_stopped_cluster_queue_is_read_from_its_own_spec_and_status(version: str) -> None:
    local_queue, cluster_queue = (
        load(version, "localqueue-of-stopped-clusterqueue"),
        load(version, "clusterqueue-stopped"),
    )
    name = cluster_queue["metadata"]["name"]
    assert queue_problem("ns", "stopped", local_queue, cluster_queue) == (
        f"LocalQueue stopped points to ClusterQueue {name} is stopped (spec.stopPolicy Hold)"
    )


@pytest.mark.parametrize("version", [V017, V019])
def test_without_the_cluster_queue_the_local_queues_word_judges(version: str) -> None:
    local_queue = load(version, "localqueue-of-stopped-clusterqueue")
    problem = queue_problem("ns", "stopped", local_queue, UNREADABLE)
    assert problem is not None
    assert problem.startswith("LocalQueue stopped is inactive (ClusterQueueIsInactive): ")


@pytest.mark.parametrize("version", [V017, V019])
def test_an_inactive_cluster_queue_says_why_in_kueues_words(version: str) -> None:
    cluster_queue = load(version, "clusterqueue-missing-flavor")
    problem = cluster_queue_problem("broken", cluster_queue)
    assert problem is not None
    assert problem.startswith("ClusterQueue broken is inactive (FlavorNotFound): Can't admit new workloads")
    assert cluster_queue_problem("gone", None) == "ClusterQueue gone doesn't exist"


def test_a_local_queues_stale_word_gives_way_to_its_active_cluster_queue() -> None:
    # A LocalQueue made together with its ClusterQueue says ClusterQueueIsInactive until Kueue looks again.
    local_queue, cluster_queue = load(V019, "localqueue-of-stopped-clusterqueue"), load(V019, "clusterqueue-active")
    assert queue_problem("ns", "stopped", local_queue, cluster_queue) is None


def test_a_stopped_local_queue_and_queues_kueue_has_not_judged() -> None:
    local_queue = load(V019, "localqueue-active")
    local_queue["spec"]["stopPolicy"] = "HoldAndDrain"
    assert queue_problem("ns", "open", local_queue) == "LocalQueue open is stopped (spec.stopPolicy HoldAndDrain)"
    fresh = {"metadata": {"name": "new"}, "spec": {"clusterQueue": "cq", "stopPolicy": "None"}}
    assert queue_problem("ns", "new", fresh, {"metadata": {"name": "cq"}, "spec": {}}) is None
    assert queue_problem("ns", "new", UNREADABLE) is None
