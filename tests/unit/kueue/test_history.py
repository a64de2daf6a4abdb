"""What Kueue did to a job, read from its real Workload (captured from Kueue v0.17.0 while a
higher-priority job preempted it: ``tests/fixtures/workloads/v0.17.0/preempted-*.yaml``)."""

from __future__ import annotations

from typing import Any

from airflow_provider_disttrain.kube.conditions import parse_time
from airflow_provider_disttrain.kueue.history import (
    current_eviction,
    describe_record,
    evictions,
    kueue_record,
    preemptor_job_uid,
    running_seconds,
)
from airflow_provider_disttrain.kueue.hold import waiting_message

PREEMPTOR_JOB_UID = "ab7bd9b8-d850-4895-9e87-a09686005087"  # in Kueue's message, as the fixtures have it


def _at(stamp: str) -> float:
    parsed = parse_time(stamp)
    assert parsed is not None
    return parsed.timestamp()


def _workload(load_yaml: Any, situation: str) -> dict[str, Any]:
    return load_yaml(f"workloads/v0.17.0/preempted-{situation}.yaml")


def test_a_requeued_workload_says_it_was_preempted_by_which_job_and_that_it_waits(load_yaml) -> None:
    requeued = _workload(load_yaml, "requeued")

    reason, message = current_eviction(requeued) or ("", "")
    said = waiting_message(requeued)

    assert reason == "Preempted"
    assert preemptor_job_uid(message) == PREEMPTOR_JOB_UID
    assert said is not None
    assert f"evicted by Kueue by the job of uid {PREEMPTOR_JOB_UID} (Preempted)" in said
    assert "due to prioritization in the ClusterQueue" in said  # Kueue's own words follow
    assert "waits to be admitted again" in said


def test_at_the_moment_of_eviction_the_workload_is_still_admitted_and_says_nothing_yet(load_yaml) -> None:
    """Kueue sets Evicted before it takes the admission back: the job still runs for a moment."""
    evicting = _workload(load_yaml, "evicting")

    assert current_eviction(evicting) is None
    assert waiting_message(evicting) is None
    assert evictions(evicting) == {"Preempted": 1}


def test_a_readmitted_workload_is_not_evicted_any_more_but_counts_the_eviction(load_yaml) -> None:
    finished = _workload(load_yaml, "readmitted-finished")

    assert current_eviction(finished) is None
    assert waiting_message(finished) is None
    assert evictions(finished) == {"Preempted": 1}


def test_the_record_of_a_preempted_job_splits_its_life_into_queued_and_admitted_time(load_yaml) -> None:
    finished = _workload(load_yaml, "readmitted-finished")
    status = finished["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    life = _at(conditions["Finished"]["lastTransitionTime"]) - _at(finished["metadata"]["creationTimestamp"])
    second_run = _at(conditions["Finished"]["lastTransitionTime"]) - _at(conditions["Admitted"]["lastTransitionTime"])

    # Long after it finished: the record no longer moves.
    record = kueue_record(finished, now=_at(conditions["Finished"]["lastTransitionTime"]) + 3600)

    assert record["evictions"] == 1 and record["evictions_by_reason"] == {"Preempted": 1}
    assert record["running_seconds"] == status["accumulatedPastExecutionTimeSeconds"] + second_run
    assert record["queued_seconds"] == life - record["running_seconds"]
    assert record["cluster_queue"] == status["admission"]["clusterQueue"]
    assert record["local_queue"] == finished["spec"]["queueName"]
    assert record["priority_class"] == "disttrain-it-low"
    assert describe_record(record) == (
        f"Kueue: queued {record['queued_seconds']} s, admitted {record['running_seconds']} s in ClusterQueue "
        f"{record['cluster_queue']}, evicted 1 time(s) (Preempted x1)"
    )


def test_a_requeued_workload_has_only_its_past_admission_counted_as_running(load_yaml) -> None:
    requeued = _workload(load_yaml, "requeued")
    now = _at(requeued["metadata"]["creationTimestamp"]) + 100

    assert running_seconds(requeued, now=now) == requeued["status"]["accumulatedPastExecutionTimeSeconds"]
    assert (
        kueue_record(requeued, now=now)["queued_seconds"]
        == 100 - requeued["status"]["accumulatedPastExecutionTimeSeconds"]
    )


def test_a_message_without_a_known_preemptor_names_nobody() -> None:
    assert preemptor_job_uid("Preempted to accommodate a workload (UID: UNKNOWN, JobUID: UNKNOWN) due to x") is None
    assert preemptor_job_uid("The ClusterQueue was stopped") is None
