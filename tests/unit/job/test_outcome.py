"""Deciding from one look at a job whether a wait is over, and how it ended."""

from __future__ import annotations

import json

import pytest

from airflow_provider_disttrain.job.outcome import (
    ERROR,
    FAILED,
    SUCCESS,
    TIMEOUT,
    JobRef,
    check_job,
    job_gone,
    make_outcome,
    seconds_to_deadline,
)
from airflow_provider_disttrain.job.status import JobState

UID = "2c1f7a4e-5b0d-4a8e-9a5e-3f6f0b1c9d21"
NOW = 1_715_678_000.0


@pytest.fixture
def ref() -> JobRef:
    return JobRef(kind="PyTorchJob", name="pytorch-simple", namespace="kubeflow", uid=UID)


def test_job_ref_title_names_kind_namespace_and_name(ref):
    assert ref.title == "PyTorchJob kubeflow/pytorch-simple"


def test_a_succeeded_job_ends_the_wait_with_success(load_yaml, ref):
    outcome = check_job(ref, load_yaml("status/pytorchjob-succeeded.yaml"), now=NOW)

    assert outcome is not None
    assert outcome["status"] == SUCCESS
    assert outcome["message"] == "PyTorchJob kubeflow/pytorch-simple succeeded"
    assert outcome["state"] == "succeeded"
    assert (outcome["kind"], outcome["name"], outcome["namespace"]) == ("PyTorchJob", "pytorch-simple", "kubeflow")
    assert outcome["job"]["duration_seconds"] == 281.0
    # It travels as a trigger event, so it must survive JSON.
    assert json.loads(json.dumps(outcome)) == outcome


def test_a_failed_job_ends_the_wait_with_the_operators_reason(load_yaml, ref):
    outcome = check_job(ref, load_yaml("status/pytorchjob-failed.yaml"), now=NOW)

    assert outcome is not None
    assert outcome["status"] == FAILED
    assert outcome["state"] == "failed"
    assert outcome["message"].startswith("PyTorchJob kubeflow/pytorch-simple failed: failed (Failed - PyTorchJobFailed")
    assert "is failed because 1 Master replica(s) failed." in outcome["message"]
    assert outcome["job"]["replica_statuses"]["Master"]["failed"] == 1


@pytest.mark.parametrize(
    "fixture",
    [
        "status/pytorchjob-running.yaml",
        "status/pytorchjob-restarting.yaml",
        "status/pytorchjob-suspended.yaml",
    ],
)
def test_an_unfinished_job_keeps_the_wait_going(load_yaml, ref, fixture):
    assert check_job(ref, load_yaml(fixture), now=NOW, startup_deadline=NOW + 60, execution_deadline=NOW + 60) is None


def test_a_job_that_disappeared_is_an_error(ref):
    outcome = check_job(ref, None, now=NOW)

    assert outcome == job_gone(ref)
    assert outcome["status"] == ERROR
    assert outcome["message"] == (
        "PyTorchJob kubeflow/pytorch-simple no longer exists: it was deleted outside this task"
    )
    assert outcome["state"] is None
    assert outcome["job"] is None


def test_a_job_recreated_under_the_same_name_is_an_error_even_if_it_succeeded(load_yaml, ref):
    job = load_yaml("status/pytorchjob-succeeded.yaml")
    job["metadata"]["uid"] = "11111111-2222-4333-8444-555555555555"

    outcome = check_job(ref, job, now=NOW)

    assert outcome is not None
    assert outcome["status"] == ERROR
    assert "deleted and recreated outside this task" in outcome["message"]
    assert "uid 11111111-2222-4333-8444-555555555555" in outcome["message"]
    assert f"expected {UID}" in outcome["message"]
    assert outcome["job"]["uid"] == "11111111-2222-4333-8444-555555555555"


def test_a_ref_without_uid_accepts_any_job_of_that_name(load_yaml):
    ref = JobRef(kind="PyTorchJob", name="pytorch-simple", namespace="kubeflow")
    outcome = check_job(ref, load_yaml("status/pytorchjob-succeeded.yaml"), now=NOW)
    assert outcome is not None
    assert outcome["status"] == SUCCESS


def test_a_job_object_without_uid_is_not_taken_for_a_replacement(load_yaml, ref):
    job = load_yaml("status/pytorchjob-running.yaml")
    del job["metadata"]["uid"]
    assert check_job(ref, job, now=NOW) is None


def test_execution_deadline_times_out_a_running_job(load_yaml, ref):
    outcome = check_job(ref, load_yaml("status/pytorchjob-running.yaml"), now=NOW, execution_deadline=NOW)

    assert outcome is not None
    assert outcome["status"] == TIMEOUT
    assert outcome["state"] == "running"
    assert outcome["message"] == (
        "PyTorchJob kubeflow/pytorch-simple did not finish within the task's execution_timeout; last state: "
        "running (Running - PyTorchJobRunning: PyTorchJob kubeflow/pytorch-simple is running.)"
    )


def test_execution_deadline_times_out_a_queued_job_too(load_yaml, ref):
    outcome = check_job(ref, load_yaml("status/pytorchjob-suspended.yaml"), now=NOW + 1, execution_deadline=NOW)
    assert outcome is not None
    assert outcome["status"] == TIMEOUT
    assert "execution_timeout" in outcome["message"]


def test_a_job_that_finished_right_at_the_deadline_is_still_a_success(load_yaml, ref):
    outcome = check_job(
        ref,
        load_yaml("status/pytorchjob-succeeded.yaml"),
        now=NOW + 10,
        startup_deadline=NOW,
        execution_deadline=NOW,
    )
    assert outcome is not None
    assert outcome["status"] == SUCCESS


def test_execution_deadline_not_reached_yet(load_yaml, ref):
    assert check_job(ref, load_yaml("status/pytorchjob-running.yaml"), now=NOW, execution_deadline=NOW + 0.5) is None


def never_ran_but_suspended(load_yaml):
    """Created suspended (a queueing system such as Kueue admits it later): it never ran."""
    job = load_yaml("status/pytorchjob-suspended.yaml")
    job["status"]["conditions"] = [c for c in job["status"]["conditions"] if c["type"] != "Running"]
    return job


@pytest.mark.parametrize(
    ("job_of", "state"),
    [(never_ran_but_suspended, "suspended"), (lambda load: load("manifests/pytorchjob.yaml"), "queued")],
    ids=["suspended before it ever ran", "no status yet"],
)
def test_startup_deadline_times_out_a_job_that_never_started(load_yaml, ref, job_of, state):
    job = job_of(load_yaml)
    job.setdefault("metadata", {})["uid"] = UID

    outcome = check_job(ref, job, now=NOW, startup_deadline=NOW - 1)

    assert outcome is not None
    assert outcome["status"] == TIMEOUT
    assert outcome["state"] == state
    assert outcome["message"].startswith(
        f"PyTorchJob kubeflow/pytorch-simple did not start within startup_timeout; last state: {state}"
    )


@pytest.mark.parametrize("fixture", ["status/pytorchjob-running.yaml", "status/pytorchjob-restarting.yaml"])
def test_startup_deadline_no_longer_applies_once_the_job_runs(load_yaml, ref, fixture):
    assert check_job(ref, load_yaml(fixture), now=NOW, startup_deadline=NOW - 3600) is None


def test_a_job_suspended_after_it_ran_is_not_timed_out_by_the_startup_limit(load_yaml, ref):
    """Hours of training, then SuspendTrainingJobOperator (or a preemption): still the same job, waited for."""
    job = load_yaml("status/pytorchjob-suspended.yaml")

    assert check_job(ref, job, now=NOW, startup_deadline=NOW - 3600) is None
    assert seconds_to_deadline(JobState.SUSPENDED, now=NOW, startup_deadline=NOW - 3600, has_run=True) is None
    # The task's execution_timeout still bounds the wait.
    outcome = check_job(ref, job, now=NOW, startup_deadline=NOW - 3600, execution_deadline=NOW - 1)
    assert outcome is not None
    assert outcome["status"] == TIMEOUT
    assert "execution_timeout; last state: suspended (Suspended" in outcome["message"]


def test_a_waiter_that_saw_the_job_run_tells_check_job(load_yaml, ref):
    """An MPIJob's conditions cannot tell a suspension after running from one before: the waiter can."""
    job = never_ran_but_suspended(load_yaml)

    assert check_job(ref, job, now=NOW, startup_deadline=NOW - 1, has_run=True) is None
    assert check_job(ref, job, now=NOW, startup_deadline=NOW - 1)["status"] == TIMEOUT


def test_make_outcome_carries_the_job_summary(load_yaml, ref):
    job = load_yaml("status/mpijob-succeeded.yaml")
    mpi_ref = JobRef(kind="MPIJob", name="pi", namespace="default")

    outcome = make_outcome(mpi_ref, SUCCESS, "done", job)

    assert outcome == {
        "status": "success",
        "kind": "MPIJob",
        "name": "pi",
        "namespace": "default",
        "state": "succeeded",
        "message": "done",
        "job": outcome["job"],
    }
    assert outcome["job"]["kind"] == "MPIJob"
    assert outcome["job"]["replica_statuses"]["Launcher"]["succeeded"] == 1


# -- seconds_to_deadline ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "startup", "execution", "expected"),
    [
        (JobState.QUEUED, NOW + 30, NOW + 600, 30.0),
        (None, NOW + 30, NOW + 600, 30.0),
        (JobState.QUEUED, NOW + 900, NOW + 600, 600.0),
        (JobState.RUNNING, NOW + 30, NOW + 600, 600.0),
        (JobState.RUNNING, NOW + 30, None, None),
        (JobState.QUEUED, None, None, None),
        (JobState.QUEUED, NOW + 30, None, 30.0),
        (JobState.QUEUED, NOW - 5, NOW + 600, 0.0),
        (JobState.SUCCEEDED, NOW + 30, NOW - 100, 0.0),
        (JobState.SUSPENDED, NOW + 30, NOW + 600, 30.0),
    ],
    ids=[
        "queued: startup first",
        "unknown state counts as queued",
        "queued: execution first",
        "running: startup ignored",
        "running: no execution deadline",
        "no deadlines",
        "queued: only startup",
        "passed deadline: no negative sleep",
        "passed execution deadline",
        "suspended, not known to have run: startup first",
    ],
)
def test_seconds_to_deadline(state, startup, execution, expected):
    assert seconds_to_deadline(state, now=NOW, startup_deadline=startup, execution_deadline=execution) == expected
