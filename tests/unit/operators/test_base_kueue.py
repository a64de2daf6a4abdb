"""Training operators and Kueue: the queue label, the scheduling queue, waiting for admission (sync, deferred)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import structlog
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_disttrain.exceptions import InvalidJobSpecError, JobTimeoutError
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, QUEUE_NAME_LABEL
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.operators.train_job import TrainJobOperator
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import CleanupPolicy, RunPolicy, WaitPolicy
from tests.unit.fakes import (
    FakeTrainingJobHook,
    ManualClock,
    condition,
    make_context,
    running_status,
    succeeded_status,
    with_hook,
)

QUOTA_MESSAGE = (
    "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu in flavor "
    "gpu-flavor, 8 more needed"
)


def stamp(delay: float = 0.0) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=delay)).strftime("%Y-%m-%dT%H:%M:%SZ")


def held_status() -> dict[str, Any]:
    """What the training-operator writes for a job Kueue's webhook created suspended."""
    return {"conditions": [condition("Created", stamp()), condition("Suspended", stamp(), "PyTorchJobSuspended")]}


def released_status() -> dict[str, Any]:
    """Kueue admitted the job and unsuspended it; its operator says so, then starts its pods."""
    return {
        "conditions": [
            condition("Created", stamp()),
            condition("Suspended", stamp(1), "PyTorchJobResumed", status="False"),
            condition("Running", stamp(1)),
        ],
        "replicaStatuses": {"Master": {"active": 1}},
    }


def add_workload_once_created(hook: FakeTrainingJobHook) -> None:
    """Kueue makes the job's Workload as soon as the job exists: so does the fake, before the next read."""
    hook.on_get = lambda _: pending_workload(hook) if hook.jobs and not hook.workloads else None


def pending_workload(hook: FakeTrainingJobHook) -> dict[str, Any]:
    """Kueue's Workload for the one job the hook holds, waiting for quota."""
    job = hook.only_job()
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"pytorchjob-{job['metadata']['name']}-1a2b3",
            "namespace": job["metadata"]["namespace"],
            "labels": {JOB_UID_LABEL: job["metadata"]["uid"]},
            "creationTimestamp": stamp(),
        },
        "status": {
            "conditions": [condition("QuotaReserved", stamp(), "Pending", QUOTA_MESSAGE, status="False")],
        },
    }
    hook.workloads.append(workload)
    return workload


def operator(hook: FakeTrainingJobHook, cls: type[TrainingJobOperator] = TrainingJobOperator, **kwargs: Any) -> Any:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "image": "trainer:1",
        "num_workers": 1,
        "wait_policy": WaitPolicy(poll_interval=0.01),
    }
    arguments.update(kwargs)
    return with_hook(cls(**arguments), hook)


# -- the manifest ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [TrainingJobOperator, PyTorchJobOperator, MPIJobOperator])
def test_queue_sets_kueues_label_on_the_job_only(cls: type[TrainingJobOperator]) -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status()])

    operator(hook, cls, local_queue="default").execute(make_context())

    manifest = hook.submitted_manifest()
    assert manifest["metadata"]["labels"][QUEUE_NAME_LABEL] == "default"
    for replica in manifest["spec"][next(key for key in manifest["spec"] if key.endswith("ReplicaSpecs"))].values():
        assert QUEUE_NAME_LABEL not in (replica["template"].get("metadata") or {}).get("labels", {})
    assert "schedulingPolicy" not in manifest["spec"].get("runPolicy", {})


def test_scheduling_queue_is_the_gang_schedulers_queue() -> None:
    hook = FakeTrainingJobHook(progression=[succeeded_status()])

    operator(hook, run_policy=RunPolicy(scheduling_queue="volcano-q")).execute(make_context())

    manifest = hook.submitted_manifest()
    assert manifest["spec"]["runPolicy"]["schedulingPolicy"] == {"queue": "volcano-q"}
    assert QUEUE_NAME_LABEL not in manifest["metadata"]["labels"]


@pytest.mark.parametrize("queue", ["Default", "gpu_queue", "a" * 64, ""])
def test_an_invalid_queue_is_refused_when_the_dag_is_parsed(queue: str) -> None:
    with pytest.raises(InvalidJobSpecError) as raised:
        TrainingJobOperator(task_id="train", image="trainer:1", local_queue=queue)
    assert raised.value.field == "local_queue"


def test_an_invalid_queue_label_in_the_manifest_is_refused_before_anything_is_sent() -> None:
    hook = FakeTrainingJobHook()
    manifest = {"metadata": {"labels": {QUEUE_NAME_LABEL: "Team_A"}}, "spec": {"pytorchReplicaSpecs": {}}}

    with pytest.raises(InvalidJobSpecError) as raised:
        operator(hook, job_manifest=manifest).execute(make_context())

    assert raised.value.field == f"metadata.labels[{QUEUE_NAME_LABEL}]"
    assert hook.calls == []


def test_queue_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="queue_timeout"):
        TrainingJobOperator(
            task_id="train", image="trainer:1", local_queue="default", wait_policy=WaitPolicy(queue_timeout=0)
        )


# -- waiting in sync mode ----------------------------------------------------------------------------------


def test_the_sync_waits_kueue_line_counts_the_time_waited_on_the_tasks_clock() -> None:
    """The Kueue reporter reads the task's one clock (``operator.clock``), as the deadlines do."""
    hook = FakeTrainingJobHook(progression=[held_status(), released_status(), succeeded_status()])
    add_workload_once_created(hook)
    task = operator(hook, local_queue="default")
    task.clock = ManualClock(datetime.now(timezone.utc).timestamp() + 13 * 60)  # the Workload is created now

    with structlog.testing.capture_logs() as logs:
        task.execute(make_context())

    [line] = [entry["event"] for entry in logs if "is queued by Kueue: " in entry["event"]]
    assert "(13 min); " in line  # then the start estimate (kueue.estimate)


def test_time_in_the_queue_does_not_count_toward_startup_timeout() -> None:
    # Held for 20 polls (0.2 s on the wait's clock), four times the startup limit: the job still runs and succeeds.
    hook = FakeTrainingJobHook(
        progression=[held_status()] * 20 + [released_status(), succeeded_status()],
        clock=ManualClock(),
        step_seconds=0.01,
    )
    add_workload_once_created(hook)
    task = operator(hook, local_queue="default", wait_policy=WaitPolicy(poll_interval=0.01, startup_timeout=0.05))

    with structlog.testing.capture_logs() as logs:
        result = task.execute(make_context())

    assert result["state"] == "succeeded"
    lines = [entry["event"] for entry in logs]
    queued = [line for line in lines if "is queued by Kueue: " in line]
    # Once, not per poll; with the job's place in its LocalQueue and how long it has waited.
    [line] = queued
    assert line.startswith(
        f"PyTorchJob default/{result['name']} is queued by Kueue: {QUOTA_MESSAGE}; position 1 of 1 in LocalQueue "
        "'default' (1 in its ClusterQueue); queued since "
    )
    assert any("is queued by Kueue in LocalQueue 'default' (Suspended" in line for line in lines)
    # The Workload is read only while Kueue holds the job, and once at the end for the result's record.
    assert len(hook.called("find_workload")) == 20 + 1
    assert result["kueue"]["workload"] == f"pytorchjob-{result['name']}-1a2b3"
    assert result["kueue"]["evictions"] == 0


def admitted_workload(name: str, seconds_ago: float) -> dict[str, Any]:
    """Another job's Workload that Kueue admitted ``seconds_ago`` through LocalQueue default's ClusterQueue."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": {JOB_UID_LABEL: name}},
        "spec": {"queueName": "default"},
        "status": {
            "admission": {"clusterQueue": "gpu-a"},
            "conditions": [condition("Admitted", stamp(-seconds_ago), "Admitted")],
        },
    }


def test_the_sync_waits_lines_estimate_the_start_from_the_admissions_in_the_cluster_queue() -> None:
    hook = FakeTrainingJobHook(progression=[held_status()] * 3 + [released_status(), succeeded_status()])
    hook.workloads = [admitted_workload(f"earlier-{i}", 300 + 600 * i) for i in range(3)]
    hook.on_get = lambda _: (
        pending_workload(hook)
        if hook.jobs and not any("earlier" not in w["metadata"]["name"] for w in hook.workloads)
        else None
    )
    task = operator(hook, local_queue="default")

    with structlog.testing.capture_logs() as logs:
        task.execute(make_context())

    estimate = (
        "estimated start: position 1 in ClusterQueue gpu-a; 3 admissions there in the last 30 min, about one every "
        "10 min: about 10 min"
    )
    # The sync wait's line about the hold (the trigger's progress line: tests/unit/triggers).
    [line] = [str(entry["event"]) for entry in logs if "is queued by Kueue: " in str(entry["event"])]
    assert "; position 1 of 1 in LocalQueue 'default' (1 in its ClusterQueue); queued since " in line
    assert line.endswith(f"; {estimate}")
    # The history is one LIST per position refresh (30 s), not one per poll.
    assert len(hook.called("list_workloads")) == len(hook.called("pending_workloads")) == 1


def test_queue_timeout_fails_with_kueues_message_and_deletes_the_queued_job() -> None:
    hook = FakeTrainingJobHook(progression=[held_status()])
    add_workload_once_created(hook)
    task = operator(
        hook,
        job_name="train-abc",
        local_queue="default",
        wait_policy=WaitPolicy(poll_interval=0.01, queue_timeout=0.05),
        cleanup_policy=CleanupPolicy(on_timeout=False),
    )

    with pytest.raises(JobTimeoutError) as raised:
        task.execute(make_context())

    message = str(raised.value)
    assert "was not admitted by Kueue within queue_timeout" in message
    assert f"Kueue: {QUOTA_MESSAGE}" in message
    # Even with delete_on_timeout=False: a job left in the queue would take quota later.
    assert "was deleted: it was still queued by Kueue" in message
    assert hook.job("train-abc") is None


def test_a_job_without_queue_never_reads_workloads() -> None:
    hook = FakeTrainingJobHook(progression=[running_status(), succeeded_status()])

    operator(hook).execute(make_context())

    assert hook.called("find_workload") == []


# -- deferring -------------------------------------------------------------------------------------------


def test_the_trigger_gets_the_queue_deadline_counted_from_the_submission() -> None:
    hook = FakeTrainingJobHook(progression=[held_status()])
    task = operator(
        hook,
        local_queue="default",
        deferrable=True,
        wait_policy=WaitPolicy(queue_timeout=timedelta(minutes=30), startup_timeout=600),
    )
    task.clock = ManualClock(1_000_000.0)  # the worker's clock when it submitted the job

    with pytest.raises(TaskDeferred) as deferred:
        task.execute(make_context())

    trigger = deferred.value.trigger
    assert trigger.deadlines.queue == 1_000_000.0 + 1800
    assert trigger.deadlines.startup == 1_000_000.0 + 600  # moved by the trigger once admitted
    assert trigger.serialize()[1]["deadlines"]["queue"] == trigger.deadlines.queue


def test_a_trainjob_gets_the_queue_label_too() -> None:
    from tests.unit.operators.test_train_job import make_hook

    hook = make_hook("complete")
    task = with_hook(
        TrainJobOperator(
            task_id="train", runtime="torch-distributed", image="trainer:1", num_nodes=2, local_queue="q-1"
        ),
        hook,
    )

    task.execute(make_context())

    manifest = hook.submitted_manifest()
    assert manifest["kind"] == "TrainJob"
    assert manifest["metadata"]["labels"][QUEUE_NAME_LABEL] == "q-1"
