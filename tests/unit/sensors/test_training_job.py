"""``TrainingJobSensor`` over the in-memory hook: poke, the poke loop, deferral and its ending."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import AirflowSensorTimeout, TaskDeferred

from airflow_provider_disttrain.exceptions import (
    JobFailedError,
    JobFailedInTrainingError,
    JobFailedOnInfrastructureError,
    LostContactError,
    TrainingJobError,
)
from airflow_provider_disttrain.job.outcome import ERROR, FAILED, SUCCESS, TIMEOUT, JobRef, lost_contact, make_outcome
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
from tests.unit.conftest import read_yaml
from tests.unit.fakes import (
    FAILED_REASON,
    OOM_KILLED,
    FakeTrainingJobHook,
    failed_status,
    make_context,
    make_job,
    make_pod,
    queued_status,
    running_status,
    succeeded_status,
    with_hook,
)


def make_sensor(hook: FakeTrainingJobHook, **kwargs: Any) -> TrainingJobSensor:
    arguments: dict[str, Any] = {"task_id": "wait", "job_name": "train-abc", "poke_interval": 0.01}
    arguments.update(kwargs)
    return with_hook(TrainingJobSensor(**arguments), hook)


def hook_with(
    status: dict[str, Any], progression: tuple[dict[str, Any], ...] = (), **kwargs: Any
) -> FakeTrainingJobHook:
    hook = FakeTrainingJobHook(**kwargs)
    hook.add_job(make_job("train-abc", hook.namespace, status=status), progression)
    return hook


@pytest.mark.parametrize("status", [queued_status(), running_status()], ids=["queued", "running"])
def test_poke_is_false_while_the_job_runs(status: dict[str, Any]) -> None:
    hook = hook_with(status)

    assert make_sensor(hook).poke(make_context()) is False
    assert hook.api_calls() == ["get_job"]


def test_poke_returns_the_summary_when_the_job_succeeded() -> None:
    hook = hook_with(succeeded_status())

    returned = make_sensor(hook).poke(make_context())

    assert isinstance(returned, PokeReturnValue)
    assert returned.is_done is True
    assert returned.xcom_value == JobView.of(hook.job("train-abc")).result("PyTorchJob")
    assert returned.xcom_value["state"] == "succeeded"


def test_poke_fails_with_the_reason_when_the_job_failed() -> None:
    hook = hook_with(failed_status())
    hook.pods["train-abc"] = [make_pod("train-abc", "master", 0, phase="Failed", terminated=OOM_KILLED)]

    with pytest.raises(JobFailedError) as raised:
        make_sensor(hook).poke(make_context())

    assert FAILED_REASON in str(raised.value)
    assert "OOMKilled" in str(raised.value)


def test_a_failed_job_fails_the_sensor_with_its_failure_class_for_a_retry_policy() -> None:
    """The sensor's failures are classed as the operators' are: OOMKilled is the training's own."""
    hook = hook_with(failed_status())
    hook.pods["train-abc"] = [make_pod("train-abc", "master", 0, phase="Failed", terminated=OOM_KILLED)]

    with pytest.raises(JobFailedInTrainingError) as raised:
        make_sensor(hook).poke(make_context())

    assert raised.value.failure["class"] == "training"
    assert raised.value.failure["reason"] == "OOMKilled"
    assert "Failure class: training (OOMKilled)" in str(raised.value)


def test_a_job_whose_pod_was_evicted_fails_the_sensor_as_the_infrastructures_failure() -> None:
    hook = hook_with(failed_status())
    evicted = make_pod("train-abc", "worker", 0, phase="Failed")
    evicted["status"].update(reason="Evicted", message="The node was low on resource: memory.")
    hook.pods["train-abc"] = [evicted]

    with pytest.raises(JobFailedOnInfrastructureError) as raised:
        make_sensor(hook, deferrable=True).execute_complete(
            make_context(), make_outcome(JobRef("PyTorchJob", "train-abc", "default"), FAILED, "failed")
        )

    assert raised.value.failure["class"] == "infrastructure"
    assert raised.value.failure["reason"] == "Evicted"


def test_the_sensors_failure_evidence_is_masked_as_the_task_log(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.log import mask_secret

    secret = "ghp_sensorSecret0123456789"
    mask_secret(secret)
    hook = hook_with(failed_status())
    crashed = {"reason": "Error", "exitCode": 1, "finishedAt": "2024-05-01T10:01:00Z"}
    hook.pods["train-abc"] = [make_pod("train-abc", "master", 0, phase="Failed", terminated=crashed)]
    hook.logs["train-abc-master-0"] = f'Traceback (most recent call last):\n  File "t.py"\nValueError: {secret}\n'
    context = make_context()
    monkeypatch.setattr("airflow.sdk.get_current_context", lambda: context)

    with pytest.raises(JobFailedError) as raised:
        make_sensor(hook).poke(context)

    pushed = dict(context["ti"].pushed)["failure"]
    assert "train-abc-master-0: ValueError: ***" in pushed["evidence"]
    assert raised.value.failure == pushed


def test_poke_fails_when_the_job_does_not_exist() -> None:
    with pytest.raises(TrainingJobError, match="no longer exists"):
        make_sensor(FakeTrainingJobHook()).poke(make_context())


def test_the_poke_loop_returns_the_summary() -> None:
    hook = hook_with(queued_status(), (running_status(), running_status(), succeeded_status()), namespace="ml")

    result = make_sensor(hook, kind="PyTorchJob").execute(make_context())

    assert result["state"] == "succeeded"
    assert result["namespace"] == "ml"  # the connection's namespace
    assert hook.api_calls() == ["get_job"] * 3


def test_the_sensor_reads_the_namespace_it_is_given() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    hook.add_job(make_job("mpi", "team-a", kind="MPIJob", status=succeeded_status()))

    make_sensor(hook, job_name="mpi", kind="mpijob", namespace="team-a").poke(make_context())

    assert hook.called("get_job")[0][0] == ("MPIJob", "mpi", "team-a")


def test_deferrable_defers_to_a_trigger_that_never_deletes_the_job() -> None:
    connection = ClusterConnection("k8s", kubeconfig={"kind": "Config"}, extras={})
    hook = hook_with(running_status(), connection=connection)
    sensor = make_sensor(hook, deferrable=True, timeout=timedelta(hours=1), poke_interval=30)

    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(make_context())

    trigger = deferred.value.trigger
    assert isinstance(trigger, TrainingJobTrigger)
    assert (trigger.kind, trigger.name, trigger.namespace, trigger.uid) == ("PyTorchJob", "train-abc", "default", None)
    assert trigger.cleanup_policy.on_kill is False  # the sensor does not own the job
    assert trigger.deadlines.execution == sensor.clock.wall() + 3600  # on the sensor's clock
    assert trigger.deadlines.startup is None
    assert trigger.wait_policy.poll_seconds == 30.0
    assert trigger.connection == connection
    assert deferred.value.method_name == "execute_complete"


def test_the_deferred_sensor_tells_its_trigger_the_gpus_the_job_asks_for() -> None:
    """A job submitted with wait_for_completion=False and sensed later still counts in disttrain.gpus_held."""
    hook = FakeTrainingJobHook()
    job = read_yaml("manifests/pytorchjob.yaml")
    job["metadata"] = make_job("train-abc")["metadata"]
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0].setdefault("resources", {})["limits"] = {"nvidia.com/gpu": 8}
    hook.add_job(job | {"status": running_status()})

    with pytest.raises(TaskDeferred) as deferred:
        make_sensor(hook, deferrable=True).execute(make_context())

    assert deferred.value.trigger.gpus_per_replica == {"Master": 8, "Worker": 8}
    assert len(hook.called("get_job")) == 1  # read off the job the sensor looks at anyway


def test_deferrable_returns_at_once_for_a_finished_job() -> None:
    hook = hook_with(succeeded_status())

    result = make_sensor(hook, deferrable=True).execute(make_context())

    assert result["state"] == "succeeded"


def event_for(status: str, job: dict[str, Any] | None) -> dict[str, Any]:
    return make_outcome(
        JobRef("PyTorchJob", "train-abc", "default"), status, f"PyTorchJob default/train-abc {status}", job
    )


def test_execute_complete_success_returns_the_summary() -> None:
    job = make_job("train-abc", status=succeeded_status())
    hook = hook_with(succeeded_status())

    assert make_sensor(hook).execute_complete(make_context(), event_for(SUCCESS, job)) == JobView.of(job).result(
        "PyTorchJob"
    )
    assert hook.calls == []


@pytest.mark.parametrize(
    ("status", "error"),
    [(FAILED, JobFailedError), (TIMEOUT, AirflowSensorTimeout), (ERROR, TrainingJobError)],
)
def test_execute_complete_other_endings_raise(status: str, error: type[Exception]) -> None:
    job = make_job("train-abc", status=failed_status() if status == FAILED else running_status())
    hook = hook_with(job["status"])

    with pytest.raises(error, match=f"PyTorchJob default/train-abc {status}") as raised:
        make_sensor(hook).execute_complete(make_context(), event_for(status, job))

    if status == FAILED:
        assert FAILED_REASON in str(raised.value)
    assert hook.called("delete_job") == []  # never the sensor's to delete


def test_execute_complete_after_lost_contact_raises_without_reading_the_server() -> None:
    job = make_job("train-abc", status=running_status())
    hook = hook_with(job["status"])
    event = lost_contact(JobRef("PyTorchJob", "train-abc", "default"), job, waited=900, last_contact=0, error="503")

    with pytest.raises(LostContactError, match="the job was last seen running"):
        make_sensor(hook).execute_complete(make_context(), event)

    assert hook.calls == []  # the server may still be away: nothing read, nothing deleted


def test_job_name_is_required() -> None:
    with pytest.raises(ValueError, match=r"^job_name: is required"):
        TrainingJobSensor(task_id="wait", job_name="")
    assert "job_name" in TrainingJobSensor.template_fields
