"""The operators acting on an existing job (delete, scale, suspend, resume) over the in-memory hook."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError, JobNotFoundError, TrainingJobError
from airflow_provider_disttrain.operators.manage import (
    DeleteTrainingJobOperator,
    ResumeTrainingJobOperator,
    ScaleTrainingJobOperator,
    SuspendTrainingJobOperator,
)
from tests.unit.fakes import (
    FakeTrainingJobHook,
    ManualClock,
    make_context,
    make_job,
    running_status,
    suspended_status,
    with_hook,
)


@pytest.fixture
def clock() -> ManualClock:
    """The operator's clock for the wait for a deletion: sleeps are recorded, and move it on at once."""
    return ManualClock(0.0)


def pytorch_job(**kwargs: Any) -> dict[str, Any]:
    spec = {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}}
    return make_job("train-abc", "ml", uid="uid-1", spec=kwargs.pop("spec", spec), **kwargs)


# -- delete ---------------------------------------------------------------------------------------------------------


def test_delete_waits_until_the_job_is_gone(clock: ManualClock) -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    hook.add_job(pytorch_job())
    hook.delete_removes = False  # finalizers: the job lingers for two reads
    hook.on_get = lambda number: hook.forget("train-abc", "ml") if number == 3 else None

    deleted = with_hook(DeleteTrainingJobOperator(task_id="rm", job_name="train-abc"), hook, clock).execute(
        make_context()
    )

    assert deleted is True
    assert hook.api_calls() == ["delete_job", "get_job", "get_job", "get_job"]
    assert hook.called("delete_job")[0] == (("PyTorchJob", "train-abc", "ml"), {"uid": None})
    assert clock.sleeps == [1, 1]


def test_delete_without_waiting(clock: ManualClock) -> None:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("train-abc"))
    hook.delete_removes = False

    operator = DeleteTrainingJobOperator(task_id="rm", job_name="train-abc", wait_for_deletion=False)

    assert with_hook(operator, hook).execute(make_context()) is True
    assert hook.api_calls() == ["delete_job"]


def test_delete_gives_up_after_the_deletion_timeout(clock: ManualClock) -> None:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("train-abc"))
    hook.delete_removes = False

    operator = DeleteTrainingJobOperator(task_id="rm", job_name="train-abc", deletion_timeout=3)

    with pytest.raises(TrainingJobError, match="PyTorchJob default/train-abc still exists 3s after its deletion"):
        with_hook(operator, hook, clock).execute(make_context())


def test_delete_of_a_missing_job_is_fine_by_default(clock: ManualClock) -> None:
    hook = FakeTrainingJobHook()

    operator = DeleteTrainingJobOperator(task_id="rm", job_name="gone", kind="MPIJob", namespace="ml")

    assert with_hook(operator, hook).execute(make_context()) is False
    assert hook.called("delete_job")[0][0] == ("MPIJob", "gone", "ml")


def test_delete_of_a_missing_job_fails_without_ignore_not_found(clock: ManualClock) -> None:
    operator = DeleteTrainingJobOperator(task_id="rm", job_name="gone", ignore_not_found=False)

    with pytest.raises(JobNotFoundError, match="PyTorchJob default/gone does not exist"):
        with_hook(operator, FakeTrainingJobHook()).execute(make_context())


# -- scale ------------------------------------------------------------------------------------------------------------


ELASTIC_SPEC = {
    "pytorchReplicaSpecs": {"Worker": {"replicas": 2}},
    "elasticPolicy": {"minReplicas": 1, "maxReplicas": 8, "rdzvBackend": "c10d"},
}


def test_scale_patches_the_worker_replicas() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    hook.add_job(pytorch_job(spec=ELASTIC_SPEC, status=running_status()))

    result = with_hook(ScaleTrainingJobOperator(task_id="scale", job_name="train-abc", replicas=4), hook).execute(
        make_context()
    )

    assert hook.called("patch_job") == [
        (("PyTorchJob", "train-abc", "ml", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}}), {})
    ]
    assert result == {
        "name": "train-abc",
        "namespace": "ml",
        "kind": "PyTorchJob",
        "previous_replicas": 2,
        "replicas": 4,
    }
    assert hook.job("train-abc", "ml")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4


def test_scale_takes_a_templated_count() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    hook.add_job(pytorch_job(spec=ELASTIC_SPEC))

    operator = ScaleTrainingJobOperator(task_id="scale", job_name="train-abc", replicas="3")

    assert with_hook(operator, hook).execute(make_context())["replicas"] == 3
    assert "replicas" in ScaleTrainingJobOperator.template_fields


def test_scale_of_an_mpijob_patches_its_replica_specs() -> None:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("mpi", kind="MPIJob", spec={"mpiReplicaSpecs": {"Launcher": {}, "Worker": {"replicas": 1}}}))

    operator = ScaleTrainingJobOperator(task_id="scale", job_name="mpi", kind="MPIJob", replicas=2)
    with_hook(operator, hook).execute(make_context())

    assert hook.called("patch_job")[0][0][3] == {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 2}}}}


def test_scale_outside_the_elastic_range_is_refused_before_patching() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    spec = {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}, "elasticPolicy": {"minReplicas": 1, "maxReplicas": 4}}
    hook.add_job(pytorch_job(spec=spec))

    operator = ScaleTrainingJobOperator(task_id="scale", job_name="train-abc", replicas=8)
    with pytest.raises(InvalidJobSpecError, match=r"outside the job's elasticPolicy range \[1, 4\]") as raised:
        with_hook(operator, hook).execute(make_context())

    assert raised.value.field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert hook.called("patch_job") == []


def test_scale_of_a_running_non_elastic_job_is_refused_before_patching() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    hook.add_job(pytorch_job(status=running_status()))

    operator = ScaleTrainingJobOperator(task_id="scale", job_name="train-abc", replicas=4)
    with pytest.raises(InvalidJobSpecError, match=r"no elasticPolicy.*WORLD_SIZE") as raised:
        with_hook(operator, hook).execute(make_context())

    assert raised.value.field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert hook.called("patch_job") == []


def test_scale_of_a_suspended_non_elastic_job_is_patched() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    spec = {
        "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}},
        "runPolicy": {"suspend": True},
    }
    hook.add_job(pytorch_job(spec=spec, status=suspended_status()))

    with_hook(ScaleTrainingJobOperator(task_id="scale", job_name="train-abc", replicas=4), hook).execute(make_context())

    assert hook.job("train-abc", "ml")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4


def test_scale_to_zero_is_refused() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    hook.add_job(pytorch_job())

    with pytest.raises(InvalidJobSpecError, match="replicas must be an integer >= 1"):
        with_hook(ScaleTrainingJobOperator(task_id="s", job_name="train-abc", replicas=0), hook).execute(make_context())
    assert hook.called("patch_job") == []


def test_scale_of_a_missing_job_fails() -> None:
    with pytest.raises(JobNotFoundError, match="PyTorchJob default/nope does not exist"):
        with_hook(ScaleTrainingJobOperator(task_id="s", job_name="nope", replicas=2), FakeTrainingJobHook()).execute(
            make_context()
        )


# -- suspend and resume ---------------------------------------------------------------------------------------------


def test_suspend_patches_run_policy_and_returns_the_summary() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    hook.add_job(pytorch_job(status=running_status()))

    result = with_hook(SuspendTrainingJobOperator(task_id="pause", job_name="train-abc"), hook).execute(make_context())

    assert hook.called("patch_job")[0][0] == (
        "PyTorchJob",
        "train-abc",
        "ml",
        {"spec": {"runPolicy": {"suspend": True}}},
    )
    assert result["name"] == "train-abc"
    assert result["uid"] == "uid-1"
    assert hook.job("train-abc", "ml")["spec"]["runPolicy"] == {"suspend": True}


def test_resume_patches_run_policy() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    hook.add_job(pytorch_job(status=suspended_status()))

    result = with_hook(ResumeTrainingJobOperator(task_id="go", job_name="train-abc"), hook).execute(make_context())

    assert hook.called("patch_job")[0][0][3] == {"spec": {"runPolicy": {"suspend": False}}}
    assert result["kind"] == "PyTorchJob"


def test_suspend_of_a_missing_job_fails_without_patching() -> None:
    hook = FakeTrainingJobHook()

    with pytest.raises(JobNotFoundError):
        with_hook(SuspendTrainingJobOperator(task_id="pause", job_name="nope"), hook).execute(make_context())
    assert hook.called("patch_job") == []


@pytest.mark.parametrize(
    "operator_class",
    [DeleteTrainingJobOperator, ScaleTrainingJobOperator, SuspendTrainingJobOperator, ResumeTrainingJobOperator],
)
def test_job_name_is_required(operator_class: type) -> None:
    kwargs = {"replicas": 1} if operator_class is ScaleTrainingJobOperator else {}

    with pytest.raises(ValueError, match=r"^job_name: is required"):
        operator_class(task_id="t", job_name="", **kwargs)
    with pytest.raises(ValueError, match=r"^kind: unknown job kind"):
        operator_class(task_id="t", job_name="j", kind="Bogus", **kwargs)
    assert "job_name" in operator_class.template_fields


def test_scale_to_more_replicas_than_any_cluster_holds_is_refused_before_patching() -> None:
    hook = FakeTrainingJobHook(namespace="ml")
    spec = {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}  # no elastic range to stop it
    hook.add_job(pytorch_job(spec=spec, status={"conditions": [{"type": "Suspended", "status": "True"}]}))
    hook.job("train-abc", "ml")["spec"]["runPolicy"] = {"suspend": True}

    operator = ScaleTrainingJobOperator(task_id="scale", job_name="train-abc", replicas=10**9)
    with pytest.raises(InvalidJobSpecError, match="at most 10000") as raised:
        with_hook(operator, hook).execute(make_context())

    assert raised.value.field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert hook.called("patch_job") == []
