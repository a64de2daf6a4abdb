"""A TrainJob's state and result, read from the status Trainer v2.3 writes (fixtures in tests/fixtures/status)."""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.job.kinds import kind_of
from airflow_provider_disttrain.job.outcome import JobRef, check_job
from airflow_provider_disttrain.job.status import JobState, has_run
from airflow_provider_disttrain.job.view import JobView

RESULT_KEYS = {
    "name",
    "namespace",
    "kind",
    "uid",
    "local_queue",
    "state",
    "conditions",
    "creation_time",
    "start_time",
    "completion_time",
    "duration_seconds",
    "replica_statuses",
}


@pytest.mark.parametrize(
    ("fixture", "state"),
    [
        ("status/trainjob-pending.yaml", JobState.QUEUED),
        ("status/trainjob-running.yaml", JobState.RUNNING),
        ("status/trainjob-complete.yaml", JobState.SUCCEEDED),
        ("status/trainjob-failed.yaml", JobState.FAILED),
        ("status/trainjob-suspended.yaml", JobState.SUSPENDED),
        ("status/trainjob-resumed.yaml", JobState.RUNNING),
    ],
)
def test_state_comes_from_the_conditions_and_the_replicated_jobs(load_yaml, fixture, state):
    assert JobView.of(load_yaml(fixture)).state is state


def test_a_trainjob_without_status_is_queued(load_yaml):
    job = load_yaml("manifests/trainjob.yaml")
    assert JobView.of(job).state is JobState.QUEUED
    assert JobView.of(job).describe() == "queued (no conditions yet)"
    assert has_run(job, kind_of(job)) is False


def test_complete_is_success_and_final_even_after_a_later_suspended_condition(load_yaml):
    job = load_yaml("status/trainjob-complete.yaml")
    job["status"]["conditions"].append(
        {"type": "Suspended", "status": "True", "reason": "Suspended", "lastTransitionTime": "2024-05-14T09:30:00Z"}
    )
    assert JobView.of(job).state is JobState.SUCCEEDED
    assert JobView.of(job).describe() == "succeeded (Complete - AllJobsCompleted: jobset completed successfully)"


def test_pods_pending_do_not_make_it_running(load_yaml):
    """``active`` counts a Job whose pods are still Pending: an unschedulable TrainJob must stay queued,
    so startup_timeout still applies to it."""
    job = load_yaml("status/trainjob-pending.yaml")
    assert job["status"]["jobsStatus"][0]["active"] == 1
    assert JobView.of(job).state is JobState.QUEUED
    assert has_run(job, kind_of(job)) is False
    outcome = check_job(JobRef("TrainJob", "multi-node-example", "kubeflow"), job, now=200.0, startup_deadline=100.0)
    assert outcome is not None and outcome["status"] == "timeout"
    assert "did not start within startup_timeout" in outcome["message"]


@pytest.mark.parametrize(
    ("fixture", "ran"),
    [
        ("status/trainjob-running.yaml", True),
        ("status/trainjob-complete.yaml", True),
        ("status/trainjob-failed.yaml", True),
        ("status/trainjob-resumed.yaml", True),
        # Suspended, its Jobs suspended: the status no longer shows it ran (a waiter that saw it run knows).
        ("status/trainjob-suspended.yaml", False),
        ("status/trainjob-pending.yaml", False),
    ],
)
def test_has_run(load_yaml, fixture, ran):
    job = load_yaml(fixture)
    assert has_run(job, kind_of(job)) is ran


def test_the_result_has_the_keys_of_every_kind_with_counts_per_replicated_job(load_yaml):
    result = JobView.of(load_yaml("status/trainjob-complete.yaml")).result("TrainJob")
    pytorch = JobView.of(load_yaml("status/pytorchjob-succeeded.yaml")).result("PyTorchJob")

    assert set(result) == set(pytorch) == RESULT_KEYS
    assert result["state"] == "succeeded"
    assert result["kind"] == "TrainJob"
    assert result["replica_statuses"] == {"node": {"active": 0, "succeeded": 1, "failed": 0}}
    assert result["conditions"] == [
        {
            "type": "Complete",
            "status": "True",
            "reason": "AllJobsCompleted",
            "message": "jobset completed successfully",
            "lastTransitionTime": "2024-05-14T09:22:08Z",
        }
    ]


def test_times_come_from_creation_and_the_terminal_condition(load_yaml):
    """A TrainJob's status has no startTime/completionTime."""
    result = JobView.of(load_yaml("status/trainjob-complete.yaml")).result("TrainJob")
    assert result["start_time"] == "2024-05-14T09:12:03Z"
    assert result["completion_time"] == "2024-05-14T09:22:08Z"
    assert result["duration_seconds"] == 605.0


def test_a_resumed_trainjob_starts_when_it_was_resumed(load_yaml):
    job = load_yaml("status/trainjob-resumed.yaml")
    job["status"]["conditions"].append(
        {"type": "Failed", "status": "True", "reason": "FailedJobs", "lastTransitionTime": "2024-05-14T09:17:30Z"}
    )
    result = JobView.of(job).result("TrainJob")
    assert (result["start_time"], result["completion_time"], result["duration_seconds"]) == (
        "2024-05-14T09:16:30Z",
        "2024-05-14T09:17:30Z",
        60.0,
    )


def test_a_running_trainjob_has_no_completion_time(load_yaml):
    result = JobView.of(load_yaml("status/trainjob-running.yaml")).result("TrainJob")
    assert result["completion_time"] is None
    assert result["duration_seconds"] is None
    assert result["replica_statuses"] == {"node": {"active": 1, "succeeded": 0, "failed": 0}}


def test_failed_outcome_carries_trainer_s_reason(load_yaml):
    job = load_yaml("status/trainjob-failed.yaml")
    outcome = check_job(JobRef("TrainJob", "multi-node-example", "kubeflow"), job, now=0.0)
    assert outcome is not None
    assert outcome["status"] == "failed"
    assert outcome["message"] == (
        "TrainJob kubeflow/multi-node-example failed: "
        "failed (Failed - FailedJobs: jobset failed due to one or more job failures "
        "(first failed job: multi-node-example-node-0))"
    )


def test_a_malformed_jobs_status_reads_as_no_counts(load_yaml):
    job = load_yaml("status/trainjob-running.yaml")
    job["status"]["jobsStatus"] = {"node": {"ready": 1}}  # a map, not the CRD's list
    assert JobView.of(job).result("TrainJob")["replica_statuses"] == {}
    assert JobView.of(job).state is JobState.QUEUED


@pytest.mark.parametrize(
    ("fixture", "line"),
    [
        ("status/trainjob-running.yaml", "running (node: 1 ready, 1 active)"),
        ("status/trainjob-pending.yaml", "queued (node: 0 ready, 1 active)"),
        ("manifests/trainjob.yaml", "queued (no conditions yet)"),
        ("status/trainjob-suspended.yaml", "suspended (Suspended - Suspended: TrainJob is suspended)"),
    ],
)
def test_the_log_line_says_what_the_replicated_jobs_do_while_no_condition_does(load_yaml, fixture, line):
    assert JobView.of(load_yaml(fixture)).describe() == line
