"""``TrainingJobSensor`` on a job Kueue holds: each poke says why it waits, in Kueue's words, once per change."""

from __future__ import annotations

import structlog

from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, QUEUE_NAME_LABEL
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from tests.unit.fakes import START, FakeTrainingJobHook, condition, make_context, make_job, with_hook

QUOTA_MESSAGE = "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu"
HELD = {"conditions": [condition("Created", START), condition("Suspended", START, "PyTorchJobSuspended")]}


def workload(message: str) -> dict:
    return {
        "metadata": {"name": "pytorchjob-train-abc-1", "namespace": "default", "labels": {JOB_UID_LABEL: "uid-1"}},
        "status": {"conditions": [condition("QuotaReserved", START, "Pending", message, status="False")]},
    }


def test_poke_logs_kueues_reason_once_per_change_and_keeps_waiting() -> None:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job(status=HELD, labels={QUEUE_NAME_LABEL: "user-queue"}))
    hook.workloads.append(workload(QUOTA_MESSAGE))
    sensor = with_hook(TrainingJobSensor(task_id="wait", job_name="train-abc"), hook)

    with structlog.testing.capture_logs() as logs:
        assert sensor.poke(make_context()) is False
        assert sensor.poke(make_context()) is False
        hook.workloads[0] = workload("LocalQueue user-queue is inactive")
        assert sensor.poke(make_context()) is False

    said = [entry["event"] for entry in logs if "is queued by Kueue: " in entry["event"]]
    # With its place in the queue (Kueue's visibility API, read once for the three pokes of 30 s).
    position = (
        "position 1 of 1 in LocalQueue 'user-queue' (1 in its ClusterQueue); no start estimate: position 1 in its "
        "ClusterQueue; no job of LocalQueue 'user-queue' seen admitted in the last 30 min, so neither its "
        "ClusterQueue nor its admission rate is known"
    )
    assert said == [
        f"PyTorchJob default/train-abc is queued by Kueue: {QUOTA_MESSAGE}; {position}",
        f"PyTorchJob default/train-abc is queued by Kueue: LocalQueue user-queue is inactive; {position}",
    ]
    assert hook.called("pending_workloads") == [(("default", "user-queue"), {})]


def test_poke_of_a_job_without_a_queue_reads_no_workload() -> None:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job(status=HELD))
    sensor = with_hook(TrainingJobSensor(task_id="wait", job_name="train-abc"), hook)

    assert sensor.poke(make_context()) is False
    assert hook.called("find_workload") == []
