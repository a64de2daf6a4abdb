"""Reading a job's state from the conditions the Kubeflow operators write.

The sequences below follow what the training-operator and the mpi-operator actually do: Running and
Restarting replace each other, Succeeded/Failed flip Running to False, suspending flips Running to
False and adds Suspended, resuming flips Suspended to False.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_disttrain.job.kinds import kind_of
from airflow_provider_disttrain.job.status import (
    JobState,
    failure_condition,
    has_run,
    parse_time,
)
from airflow_provider_disttrain.job.view import JobView


def condition(type_: str, status: str, at: str, reason: str | None = None, message: str | None = None) -> dict:
    result = {
        "type": type_,
        "status": status,
        "reason": reason or f"PyTorchJob{type_}",
        "lastUpdateTime": at,
        "lastTransitionTime": at,
    }
    if message is not None:
        result["message"] = message
    return result


def job_with(*conditions: dict, kind: str | None = None) -> dict:
    job = {"metadata": {"name": "mnist", "namespace": "team-a"}, "status": {"conditions": list(conditions)}}
    return {"kind": kind, **job} if kind else job


T0 = "2024-05-14T09:12:03Z"
T1 = "2024-05-14T09:12:31Z"
T2 = "2024-05-14T09:13:52Z"
T3 = "2024-05-14T09:14:10Z"
T4 = "2024-05-14T09:16:45Z"


SEQUENCES = [
    ("just created", [condition("Created", "True", T0)], JobState.QUEUED),
    (
        "pods came up",
        [condition("Created", "True", T0), condition("Running", "True", T1)],
        JobState.RUNNING,
    ),
    (
        "a worker failed and is being restarted (Restarting replaces Running)",
        [condition("Created", "True", T0), condition("Restarting", "True", T2)],
        JobState.RUNNING,
    ),
    (
        "the restarted worker is back (Running replaces Restarting)",
        [condition("Created", "True", T0), condition("Running", "True", T3)],
        JobState.RUNNING,
    ),
    (
        "suspended before it ever ran",
        [condition("Created", "True", T0), condition("Suspended", "True", T1)],
        JobState.SUSPENDED,
    ),
    (
        "suspended while running: Running flipped to False",
        [
            condition("Created", "True", T0),
            condition("Running", "False", T2, reason="PyTorchJobSuspended"),
            condition("Suspended", "True", T2),
        ],
        JobState.SUSPENDED,
    ),
    (
        "resumed: Suspended flipped to False, then Running again",
        [
            condition("Created", "True", T0),
            condition("Suspended", "False", T2, reason="PyTorchJobResumed"),
            condition("Running", "True", T3),
        ],
        JobState.RUNNING,
    ),
    (
        "succeeded: Running flipped to False as the operator does",
        [
            condition("Created", "True", T0),
            condition("Running", "False", T1),
            condition("Succeeded", "True", T4),
        ],
        JobState.SUCCEEDED,
    ),
    (
        "failed after running",
        [
            condition("Created", "True", T0),
            condition("Running", "False", T1),
            condition("Failed", "True", T3),
        ],
        JobState.FAILED,
    ),
    (
        "failed is final even if a newer Running True shows up",
        [
            condition("Created", "True", T0),
            condition("Failed", "True", T2),
            condition("Running", "True", T4),
        ],
        JobState.FAILED,
    ),
    (
        "succeeded is final even if a newer Restarting True shows up",
        [condition("Succeeded", "True", T2), condition("Restarting", "True", T4)],
        JobState.SUCCEEDED,
    ),
    (
        "a newer condition that is False does not count",
        [condition("Created", "True", T0), condition("Running", "False", T4)],
        JobState.QUEUED,
    ),
    (
        "Created and Running in one reconcile (same second): the later entry wins",
        [condition("Created", "True", T0), condition("Running", "True", T0)],
        JobState.RUNNING,
    ),
    (
        "same second, other order: the later entry still wins",
        [condition("Running", "True", T0), condition("Created", "True", T0)],
        JobState.QUEUED,
    ),
    (
        "an unknown condition type is ignored",
        [condition("Running", "True", T1), condition("PodsReady", "True", T4)],
        JobState.RUNNING,
    ),
    (
        "condition status is compared case-insensitively",
        [condition("Created", "True", T0), condition("Running", "true", T1)],
        JobState.RUNNING,
    ),
]


@pytest.mark.parametrize(("story", "conditions", "expected"), SEQUENCES, ids=[case[0] for case in SEQUENCES])
def test_job_state_follows_the_operators_condition_sequences(story, conditions, expected):
    assert JobView.of(job_with(*conditions)).state is expected


@pytest.mark.parametrize(
    "job",
    [
        {"metadata": {"name": "mnist"}},
        {"metadata": {"name": "mnist"}, "status": None},
        {"metadata": {"name": "mnist"}, "status": {}},
        {"metadata": {"name": "mnist"}, "status": {"conditions": []}},
        {"metadata": {"name": "mnist"}, "status": {"conditions": None}},
    ],
    ids=["no status", "status null", "empty status", "empty conditions", "conditions null"],
)
def test_a_job_the_operator_has_not_reconciled_yet_is_queued(job):
    assert JobView.of(job).state is JobState.QUEUED


def test_condition_without_last_transition_time_is_ordered_by_last_update_time():
    created = {"type": "Created", "status": "True", "lastUpdateTime": T0}
    running = {"type": "Running", "status": "True", "lastUpdateTime": T1}
    # Listed newest first: only the timestamps can tell that Running came later.
    assert JobView.of(job_with(running, created)).state is JobState.RUNNING


def test_newer_timestamp_beats_list_order():
    assert (
        JobView.of(job_with(condition("Running", "True", T2), condition("Suspended", "True", T1))).state
        is JobState.RUNNING
    )


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("status/pytorchjob-running.yaml", JobState.RUNNING),
        ("status/pytorchjob-restarting.yaml", JobState.RUNNING),
        ("status/pytorchjob-suspended.yaml", JobState.SUSPENDED),
        ("status/pytorchjob-succeeded.yaml", JobState.SUCCEEDED),
        ("status/pytorchjob-failed.yaml", JobState.FAILED),
        ("status/mpijob-succeeded.yaml", JobState.SUCCEEDED),
        ("manifests/pytorchjob.yaml", JobState.QUEUED),
    ],
)
def test_job_state_of_real_job_objects(load_yaml, fixture, expected):
    assert JobView.of(load_yaml(fixture)).state is expected


@pytest.mark.parametrize(
    ("state", "terminal"),
    [(JobState.QUEUED, False), (JobState.RUNNING, False), (JobState.SUCCEEDED, True), (JobState.FAILED, True)],
)
def test_only_succeeded_and_failed_are_terminal(state, terminal):
    assert state.is_terminal is terminal


def test_job_state_is_a_string_enum_usable_in_trigger_events():
    assert JobState("running") is JobState.RUNNING
    assert json.dumps({"state": JobState.FAILED}) == '{"state": "failed"}'


# -- job_result -------------------------------------------------------------------------------------


def test_result_of_a_succeeded_job_summarises_it_for_xcom(load_yaml):
    job = load_yaml("status/pytorchjob-succeeded.yaml")

    result = JobView.of(job).result("PyTorchJob")

    assert json.loads(json.dumps(result)) == result
    assert result["name"] == "pytorch-simple"
    assert result["namespace"] == "kubeflow"
    assert result["kind"] == "PyTorchJob"
    assert result["uid"] == "2c1f7a4e-5b0d-4a8e-9a5e-3f6f0b1c9d21"
    assert result["state"] == "succeeded"
    assert result["start_time"] == "2024-05-14T09:12:04Z"
    assert result["completion_time"] == "2024-05-14T09:16:45Z"
    # 09:12:04 -> 09:16:45 is 4 minutes 41 seconds.
    assert result["duration_seconds"] == 281.0
    assert result["replica_statuses"] == {
        "Master": {"active": 0, "succeeded": 1, "failed": 0},
        "Worker": {"active": 0, "succeeded": 1, "failed": 0},
    }
    assert result["conditions"] == [
        {
            "type": "Created",
            "status": "True",
            "reason": "PyTorchJobCreated",
            "message": "PyTorchJob pytorch-simple is created.",
            "lastTransitionTime": "2024-05-14T09:12:03Z",
        },
        {
            "type": "Running",
            "status": "False",
            "reason": "PyTorchJobRunning",
            "message": "PyTorchJob kubeflow/pytorch-simple is running.",
            "lastTransitionTime": "2024-05-14T09:12:31Z",
        },
        {
            "type": "Succeeded",
            "status": "True",
            "reason": "PyTorchJobSucceeded",
            "message": "PyTorchJob kubeflow/pytorch-simple successfully completed.",
            "lastTransitionTime": "2024-05-14T09:16:45Z",
        },
    ]


def test_result_of_a_failed_job_counts_the_failed_replica(load_yaml):
    result = JobView.of(load_yaml("status/pytorchjob-failed.yaml")).result("PyTorchJob")

    assert result["state"] == "failed"
    assert result["duration_seconds"] == 126.0
    assert result["replica_statuses"]["Master"] == {"active": 0, "succeeded": 0, "failed": 1}
    assert result["replica_statuses"]["Worker"] == {"active": 1, "succeeded": 0, "failed": 0}
    assert result["conditions"][-1]["message"] == (
        "PyTorchJob kubeflow/pytorch-simple is failed because 1 Master replica(s) failed."
    )


def test_result_of_a_running_job_has_no_completion_or_duration(load_yaml):
    result = JobView.of(load_yaml("status/pytorchjob-running.yaml")).result("PyTorchJob")

    assert result["state"] == "running"
    assert result["start_time"] == "2024-05-14T09:12:04Z"
    assert result["completion_time"] is None
    assert result["duration_seconds"] is None
    assert result["replica_statuses"]["Master"]["active"] == 1


def test_result_of_a_suspended_job_has_no_start_time_and_empty_replica_counts(load_yaml):
    result = JobView.of(load_yaml("status/pytorchjob-suspended.yaml")).result("PyTorchJob")

    assert result["state"] == "suspended"
    assert result["start_time"] is None
    assert result["duration_seconds"] is None
    assert result["replica_statuses"] == {
        "Master": {"active": 0, "succeeded": 0, "failed": 0},
        "Worker": {"active": 0, "succeeded": 0, "failed": 0},
    }


def test_result_of_an_mpijob_uses_launcher_and_worker_replica_statuses(load_yaml):
    result = JobView.of(load_yaml("status/mpijob-succeeded.yaml")).result("MPIJob")

    assert json.loads(json.dumps(result)) == result
    assert result["kind"] == "MPIJob"
    assert result["state"] == "succeeded"
    assert result["duration_seconds"] == 37.0
    assert result["replica_statuses"] == {
        "Launcher": {"active": 0, "succeeded": 1, "failed": 0},
        "Worker": {"active": 0, "succeeded": 0, "failed": 0},
    }
    assert [c["reason"] for c in result["conditions"]] == ["MPIJobCreated", "MPIJobRunning", "MPIJobSucceeded"]


def test_result_of_a_fresh_job_without_status():
    result = JobView.of({"metadata": {"name": "mnist", "namespace": "team-a", "uid": "u-1"}}).result("TFJob")

    assert result == {
        "name": "mnist",
        "namespace": "team-a",
        "kind": "TFJob",
        "uid": "u-1",
        "local_queue": None,
        "state": "queued",
        "conditions": [],
        "creation_time": None,
        "start_time": None,
        "completion_time": None,
        "duration_seconds": None,
        "replica_statuses": {},
    }


def test_result_duration_handles_fractional_seconds_and_offsets():
    job = {
        "metadata": {"name": "mnist"},
        "status": {"startTime": "2024-05-14T09:59:59.500000Z", "completionTime": "2024-05-14T12:00:00+02:00"},
    }
    # 12:00+02:00 is 10:00Z, half a second after the start.
    assert JobView.of(job).result("PyTorchJob")["duration_seconds"] == 0.5


def test_result_drops_condition_keys_the_operator_did_not_set():
    job = job_with({"type": "Created", "status": "True"})
    assert JobView.of(job).result("PyTorchJob")["conditions"] == [{"type": "Created", "status": "True"}]


# -- describe_state, failure_condition, parse_time ---------------------------


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        (
            "status/pytorchjob-running.yaml",
            "running (Running - PyTorchJobRunning: PyTorchJob kubeflow/pytorch-simple is running.)",
        ),
        (
            "status/pytorchjob-restarting.yaml",
            "running (Restarting - PyTorchJobRestarting: "
            "PyTorchJob pytorch-simple is restarting because 1 Worker replica(s) failed.)",
        ),
        (
            "status/pytorchjob-suspended.yaml",
            "suspended (Suspended - PyTorchJobSuspended: PyTorchJob pytorch-simple is suspended.)",
        ),
        (
            "status/pytorchjob-failed.yaml",
            "failed (Failed - PyTorchJobFailed: "
            "PyTorchJob kubeflow/pytorch-simple is failed because 1 Master replica(s) failed.)",
        ),
        (
            "status/mpijob-succeeded.yaml",
            "succeeded (Succeeded - MPIJobSucceeded: MPIJob default/pi successfully completed.)",
        ),
    ],
)
def test_describe_state_names_state_condition_reason_and_message(load_yaml, fixture, expected):
    assert JobView.of(load_yaml(fixture)).describe() == expected


def test_describe_state_before_the_operator_saw_the_job():
    assert JobView.of({"metadata": {"name": "mnist"}}).describe() == "queued (no conditions yet)"


def test_describe_state_without_reason_or_message_shows_only_the_type():
    assert JobView.of(job_with({"type": "Running", "status": "True"})).describe() == "running (Running)"


def test_describe_state_explains_a_failure_with_the_failed_condition_not_a_later_running_one():
    job = job_with(
        condition(
            "Failed", "True", T2, message="PyTorchJob team-a/mnist is failed because 1 Worker replica(s) failed."
        ),
        condition("Running", "True", T4, message="PyTorchJob team-a/mnist is running."),
    )

    assert JobView.of(job).describe() == (
        "failed (Failed - PyTorchJobFailed: PyTorchJob team-a/mnist is failed because 1 Worker replica(s) failed.)"
    )


def test_failure_condition_gives_reason_and_message_of_a_failed_job(load_yaml):
    assert failure_condition(load_yaml("status/pytorchjob-failed.yaml")) == (
        "PyTorchJobFailed",
        "PyTorchJob kubeflow/pytorch-simple is failed because 1 Master replica(s) failed.",
    )


@pytest.mark.parametrize(
    "fixture", ["status/pytorchjob-running.yaml", "status/pytorchjob-succeeded.yaml", "manifests/pytorchjob.yaml"]
)
def test_failure_condition_is_none_unless_the_job_failed(load_yaml, fixture):
    assert failure_condition(load_yaml(fixture)) is None


def test_failure_condition_ignores_a_failed_condition_that_is_false():
    assert failure_condition(job_with(condition("Failed", "False", T2))) is None


def test_failure_condition_with_missing_reason_and_message_gives_empty_strings():
    assert failure_condition(job_with({"type": "Failed", "status": "True"})) == ("", "")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-14T09:12:04Z", datetime(2024, 5, 14, 9, 12, 4, tzinfo=timezone.utc)),
        ("2024-05-14T11:12:04+02:00", datetime(2024, 5, 14, 9, 12, 4, tzinfo=timezone.utc)),
        (
            "2024-05-14T09:12:04.250000Z",
            datetime(2024, 5, 14, 9, 12, 4, tzinfo=timezone.utc) + timedelta(milliseconds=250),
        ),
        (None, None),
        ("", None),
        ("yesterday", None),
    ],
)
def test_parse_time_reads_rfc3339_and_tolerates_garbage(value, expected):
    assert parse_time(value) == expected


# -- has_run: whether the startup limit still applies ------------------------------------------------------

HAS_RUN = [
    ("just created", [condition("Created", "True", T0)], False),
    ("running", [condition("Created", "True", T0), condition("Running", "True", T1)], True),
    ("restarting", [condition("Created", "True", T0), condition("Restarting", "True", T1)], True),
    ("created suspended (a queueing system holds it)", [condition("Suspended", "True", T0)], False),
    (
        # The training-operator flips Running to False only when it was running.
        "suspended after it ran (training-operator)",
        [
            condition("Created", "True", T0),
            condition("Running", "False", T2, reason="PyTorchJobSuspended"),
            condition("Suspended", "True", T2),
        ],
        True,
    ),
    (
        "resumed, pods not up again yet",
        [
            condition("Created", "True", T0),
            condition("Running", "False", T2, reason="PyTorchJobSuspended"),
            condition("Suspended", "False", T3, reason="PyTorchJobResumed"),
        ],
        True,
    ),
    (
        # The mpi-operator writes Running=False on every suspension, whether or not the job ran.
        "suspended MPIJob: Running=False MPIJobSuspended says nothing",
        [
            condition("Created", "True", T0, reason="MPIJobCreated"),
            condition("Suspended", "True", T1, reason="MPIJobSuspended"),
            condition("Running", "False", T1, reason="MPIJobSuspended"),
        ],
        False,
    ),
    ("succeeded", [condition("Succeeded", "True", T4)], True),
    ("failed before any pod ran", [condition("Failed", "True", T4)], True),
]


@pytest.mark.parametrize(("conditions", "expected"), [row[1:] for row in HAS_RUN], ids=[row[0] for row in HAS_RUN])
def test_has_run(conditions, expected):
    # The reasons name the kind that wrote them (MPIJobSuspended: the mpi-operator), as on a real job.
    kind = "MPIJob" if any(str(c.get("reason")).startswith("MPIJob") for c in conditions) else "PyTorchJob"
    job = job_with(*conditions, kind=kind)
    assert has_run(job, kind_of(job)) is expected


def test_the_real_suspended_pytorchjob_has_run_and_reads_as_suspended(load_yaml):
    job = load_yaml("status/pytorchjob-suspended.yaml")

    assert has_run(job, kind_of(job))
    assert JobView.of(job).state is JobState.SUSPENDED
    assert JobView.of(job).describe().startswith("suspended (Suspended - PyTorchJobSuspended")
