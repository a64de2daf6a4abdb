"""``TrainingJobOperator`` flows with the hook replaced by ``FakeTrainingJobHook`` at the API boundary.

Everything above the hook runs for real: manifest building and validation, naming, reattachment,
the sync wait and its deadlines, deferral, ``execute_complete`` and the explanation of a failure
(``diagnostics`` over the fake's pods, logs and events).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferralTimeout, TaskDeferred

from airflow_provider_disttrain.exceptions import (
    InvalidJobSpecError,
    JobAlreadyExistsError,
    JobFailedError,
    JobTimeoutError,
    TrainingJobError,
)
from airflow_provider_disttrain.hooks import watch_registry
from airflow_provider_disttrain.job.outcome import ERROR, JobRef, make_outcome
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.ownership.identity import STATE_STORE_KEY
from airflow_provider_disttrain.ownership.naming import (
    TASK_INSTANCE_LABEL,
    legacy_task_instance_key,
    task_instance_labels,
)
from airflow_provider_disttrain.parameters import CleanupPolicy, RunPolicy, WaitPolicy
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
from tests.unit.fakes import (
    FAILED_REASON,
    OOM_KILLED,
    FakeStateStore,
    FakeTI,
    FakeTrainingJobHook,
    InMemoryWatches,
    ManualClock,
    failed_status,
    make_context,
    make_event,
    make_job,
    make_pod,
    queued_status,
    running_status,
    succeeded_status,
    with_hook,
)

REPO = Path(__file__).resolve().parents[3]


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> TrainingJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "image": "trainer:1",
        "num_workers": 2,
        "wait_policy": WaitPolicy(poll_interval=0.01),
    }
    arguments.update(kwargs)
    return with_hook(TrainingJobOperator(**arguments), hook)


def progressing(*statuses: dict[str, Any], **kwargs: Any) -> FakeTrainingJobHook:
    return FakeTrainingJobHook(progression=statuses, **kwargs)


def our_labels(ti: FakeTI, try_number: int = 1, **changes: Any) -> dict[str, str]:
    """The labels ``ti``'s task instance puts on its job, with ``changes`` (another run, map index...)."""
    identity = {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id, "map_index": ti.map_index, **changes}
    return task_instance_labels(try_number=try_number, **identity)


def add_failing_pods(hook: FakeTrainingJobHook, name: str) -> None:
    """A Master killed for memory and a healthy worker, with a log and a Warning event."""
    hook.pods[name] = [make_pod(name, "master", 0, phase="Failed", terminated=OOM_KILLED), make_pod(name, "worker", 0)]
    hook.logs[f"{name}-master-0"] = "loading shards\nCUDA out of memory? no: host memory\n"
    hook.events.append(make_event(f"{name}-master-0", "BackOff", "Back-off restarting failed container"))


def trigger_event(job: dict[str, Any] | None, **trigger_kwargs: Any) -> dict[str, Any]:
    """The event the real trigger fires when its first read returns ``job``."""
    kwargs = {"kind": "PyTorchJob", "name": "train-abc", "namespace": "default", "uid": "uid-1", "poll_interval": 0.01}
    kwargs.update(trigger_kwargs)
    trigger = TrainingJobTrigger(**kwargs)
    cluster = FakeTrainingJobHook()
    if job is not None:
        cluster.add_job(job)

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger fired no event")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(watch_registry, "subscribe", InMemoryWatches(cluster).subscribe)
        return asyncio.run(first_event())


# -- sync mode ---------------------------------------------------------------------------------------------------


def test_sync_success_returns_the_json_safe_summary() -> None:
    hook = progressing(queued_status(), running_status(workers=2), succeeded_status(workers=2))
    ti = FakeTI()

    result = make_operator(hook).execute(make_context(ti))

    job = hook.only_job()
    # The job's summary, and what its pods held: none are listed here, so nothing says how long they ran.
    usage = result.pop("usage")
    assert result == JobView.of(job).result("PyTorchJob")
    assert usage == {"gpus": 0, "gpu_seconds": None, "running_seconds": None, "queued_seconds": None}
    assert json.loads(json.dumps(result)) == result
    assert result["state"] == "succeeded"
    assert result["replica_statuses"] == {
        "Master": {"active": 0, "succeeded": 1, "failed": 0},
        "Worker": {"active": 0, "succeeded": 2, "failed": 0},
    }
    assert ti.pushed == [("job_name", job["metadata"]["name"]), ("job_namespace", "default")]
    assert hook.called("delete_job") == []


def test_sync_submission_names_labels_and_places_the_job() -> None:
    hook = progressing(succeeded_status(), namespace="ml")
    ti = FakeTI(dag_id="nightly", task_id="train", run_id="scheduled__2024-05-01", try_number=3)
    store = FakeStateStore()

    make_operator(hook).execute(make_context(ti, store))

    [(args, kwargs)] = hook.called("create_job")
    kind, manifest, namespace = args
    assert (kind, namespace, kwargs) == ("PyTorchJob", "ml", {"dry_run": False})
    assert manifest["metadata"]["namespace"] == "ml"
    assert manifest["metadata"]["name"].startswith("train-")
    assert manifest["metadata"]["labels"] == our_labels(ti, try_number=3)
    replicas = manifest["spec"]["pytorchReplicaSpecs"]
    assert replicas["Worker"]["replicas"] == 2
    assert replicas["Master"]["template"]["spec"]["containers"][0]["image"] == "trainer:1"
    # What a later try needs to find this job again.
    job = hook.only_job()
    saved = store.values[STATE_STORE_KEY]
    assert {key: saved[key] for key in ("kind", "name", "namespace", "uid")} == {
        "kind": "PyTorchJob",
        "name": job["metadata"]["name"],
        "namespace": "ml",
        "uid": job["metadata"]["uid"],
    }
    # Reattachment looks for this task instance's jobs before creating one: this deployment's, then
    # (a later try) those an older release made, labelled with the key that named no deployment.
    assert hook.api_calls()[:3] == ["find_jobs", "find_jobs", "create_job"]
    assert [call[0][2] for call in hook.called("find_jobs")] == [
        {TASK_INSTANCE_LABEL: our_labels(ti)[TASK_INSTANCE_LABEL]},
        {TASK_INSTANCE_LABEL: legacy_task_instance_key("nightly", "train", "scheduled__2024-05-01", -1)},
    ]


def test_namespace_of_the_manifest_or_the_operator_wins_over_the_connection() -> None:
    manifest = {"metadata": {"name": "from-manifest", "namespace": "team-a"}}
    hook = progressing(succeeded_status(), namespace="ml")

    make_operator(hook, job_manifest=manifest).execute(make_context())
    assert hook.only_job()["metadata"]["namespace"] == "team-a"
    assert hook.only_job()["metadata"]["name"].startswith("from-manifest-")

    hook = progressing(succeeded_status(), namespace="ml")
    make_operator(hook, job_manifest=manifest, namespace="team-a").execute(make_context())
    assert hook.only_job()["metadata"]["namespace"] == "team-a"

    hook = progressing(succeeded_status(), namespace="ml")
    make_operator(hook, namespace="team-b").execute(make_context())
    assert hook.only_job()["metadata"]["namespace"] == "team-b"


def test_a_namespace_contradicting_the_manifests_is_refused_before_anything_is_sent() -> None:
    manifest = {"metadata": {"name": "from-manifest", "namespace": "team-a"}}
    hook = progressing(succeeded_status(), namespace="ml")

    with pytest.raises(InvalidJobSpecError, match=r"'team-b' contradicts the manifest's metadata\.namespace 'team-a'"):
        make_operator(hook, job_manifest=manifest, namespace="team-b").execute(make_context())
    assert hook.jobs == {}


def test_sync_failure_explains_the_reason_and_the_oom_killed_replica() -> None:
    hook = progressing(running_status(), failed_status())
    add_failing_pods(hook, "train-abc")

    with pytest.raises(JobFailedError) as raised:
        make_operator(hook, job_name="train-abc").execute(make_context())

    message = str(raised.value)
    assert message.startswith("PyTorchJob default/train-abc failed")
    assert f"Failed condition: {FAILED_REASON}" in message
    assert "master-0 (train-abc-master-0): Failed - container pytorch: OOMKilled, exit code 137" in message
    assert "  | CUDA out of memory? no: host memory" in message
    assert "train-abc-master-0: BackOff: Back-off restarting failed container" in message
    assert hook.called("delete_job") == []  # delete_on_finish="never"


@pytest.mark.parametrize(
    ("delete_on_finish", "final", "deleted"),
    [
        ("never", "succeeded", False),
        ("never", "failed", False),
        ("succeeded", "succeeded", True),
        ("succeeded", "failed", False),
        ("always", "succeeded", True),
        ("always", "failed", True),
    ],
)
def test_delete_on_finish(delete_on_finish: str, final: str, deleted: bool) -> None:
    hook = progressing(running_status(), succeeded_status() if final == "succeeded" else failed_status())
    operator = make_operator(hook, job_name="train-abc", cleanup_policy=CleanupPolicy(on_finish=delete_on_finish))

    if final == "succeeded":
        operator.execute(make_context())
    else:
        with pytest.raises(JobFailedError):
            operator.execute(make_context())

    deletes = hook.called("delete_job")
    assert bool(deletes) == deleted
    assert (hook.job("train-abc") is None) == deleted
    if deleted:
        assert deletes[0][1]["uid"] == "uid-created-1"


def test_startup_timeout_fails_the_task_and_deletes_the_job() -> None:
    hook = progressing(queued_status())

    task = make_operator(hook, job_name="train-abc", wait_policy=WaitPolicy(poll_interval=0.01, startup_timeout=0.05))

    with pytest.raises(JobTimeoutError) as raised:
        task.execute(make_context())

    message = str(raised.value)
    assert "did not start within startup_timeout" in message
    assert "was deleted (cleanup_policy.on_timeout=True)" in message
    assert hook.job("train-abc") is None
    assert hook.called("delete_job")[0][1]["uid"] == "uid-created-1"


def test_startup_timeout_keeps_the_job_when_asked_to() -> None:
    hook = progressing(queued_status())

    with pytest.raises(JobTimeoutError) as raised:
        make_operator(
            hook,
            job_name="train-abc",
            wait_policy=WaitPolicy(poll_interval=0.01, startup_timeout=0.05),
            cleanup_policy=CleanupPolicy(on_timeout=False),
        ).execute(make_context())

    assert "was deleted" not in str(raised.value)
    assert hook.job("train-abc") is not None
    assert hook.called("delete_job") == []


def test_a_job_deleted_by_someone_else_fails_the_task() -> None:
    hook = progressing(running_status())
    hook.on_get = lambda number: hook.forget("train-abc") if number == 3 else None

    with pytest.raises(TrainingJobError, match="no longer exists") as raised:
        make_operator(hook, job_name="train-abc").execute(make_context())
    assert not isinstance(raised.value, (JobFailedError, JobTimeoutError))


class Killed(BaseException):
    """What the task runner's signal handler raises into ``execute``."""


def test_on_kill_during_the_sync_wait_deletes_the_job_with_its_uid() -> None:
    hook = progressing(running_status())
    operator = make_operator(hook, job_name="train-abc")

    def kill(number: int) -> None:
        if number == 3:
            raise Killed

    hook.on_get = kill
    with pytest.raises(Killed):
        operator.execute(make_context())
    operator.on_kill()

    assert hook.called("delete_job") == [(("PyTorchJob", "train-abc", "default"), {"uid": "uid-created-1"})]


def test_on_kill_leaves_the_job_with_delete_on_kill_false() -> None:
    hook = progressing(running_status())
    operator = make_operator(hook, job_name="train-abc", cleanup_policy=CleanupPolicy(on_kill=False))
    hook.on_get = lambda number: (_ for _ in ()).throw(Killed) if number == 3 else None

    with pytest.raises(Killed):
        operator.execute(make_context())
    operator.on_kill()

    assert hook.called("delete_job") == []


def test_on_kill_before_anything_was_submitted_does_nothing() -> None:
    hook = FakeTrainingJobHook()

    make_operator(hook).on_kill()

    assert hook.calls == []


@pytest.mark.parametrize(("delete_on_timeout", "deleted"), [(True, True), (False, False)])
def test_execution_timeout_in_sync_mode_follows_delete_on_timeout(delete_on_timeout: bool, deleted: bool) -> None:
    hook = progressing(running_status())
    operator = make_operator(hook, job_name="train-abc", cleanup_policy=CleanupPolicy(on_timeout=delete_on_timeout))
    hook.on_get = lambda number: (_ for _ in ()).throw(AirflowTaskTimeout("timed out")) if number == 3 else None

    with pytest.raises(AirflowTaskTimeout):
        operator.execute(make_context())
    operator.on_kill()  # the task runner kills the task after the timeout

    assert bool(hook.called("delete_job")) == deleted


@pytest.mark.parametrize(("delete_on_timeout", "deleted"), [(True, True), (False, False)])
def test_a_timeout_while_the_create_reply_is_on_its_way_follows_delete_on_timeout(
    delete_on_timeout: bool, deleted: bool
) -> None:
    """The job exists but the task never learnt its uid: on_kill finds it by name and this instance's label."""
    hook = progressing(running_status())
    create = hook.create_job

    def create_then_time_out(*args: Any, **kwargs: Any) -> Any:
        create(*args, **kwargs)
        raise AirflowTaskTimeout("timed out")

    hook.create_job = create_then_time_out  # type: ignore[method-assign]
    operator = make_operator(hook, job_name="train-abc", cleanup_policy=CleanupPolicy(on_timeout=delete_on_timeout))

    with pytest.raises(AirflowTaskTimeout):
        operator.execute(make_context())
    operator.on_kill()

    assert (hook.job("train-abc") is None) == deleted
    assert hook.called("delete_job") == (
        [(("PyTorchJob", "train-abc", "default"), {"uid": "uid-created-1"})] if deleted else []
    )


def test_a_timeout_between_the_submission_and_the_wait_keeps_the_job_when_asked() -> None:
    hook = progressing(running_status())
    ti = FakeTI()
    ti.xcom_push = lambda key, value: (_ for _ in ()).throw(AirflowTaskTimeout("timed out"))  # type: ignore[method-assign]
    operator = make_operator(hook, job_name="train-abc", cleanup_policy=CleanupPolicy(on_timeout=False))

    with pytest.raises(AirflowTaskTimeout):
        operator.execute(make_context(ti))
    operator.on_kill()

    assert hook.job("train-abc") is not None
    assert hook.called("delete_job") == []


def test_a_kill_before_the_create_leaves_another_owners_job_of_that_name_alone() -> None:
    hook = progressing(running_status())
    hook.add_job(make_job("train-abc", labels={TASK_INSTANCE_LABEL: "someone-else"}))
    hook.on_get = lambda number: (_ for _ in ()).throw(Killed) if number == 1 else None  # the claim's look
    operator = make_operator(hook, job_name="train-abc")

    with pytest.raises(Killed):
        operator.execute(make_context())
    operator.on_kill()

    assert hook.job("train-abc") is not None
    assert hook.called("delete_job") == []


def test_wait_for_completion_false_returns_once_submitted() -> None:
    hook = progressing(running_status())

    result = make_operator(hook, wait_for_completion=False, deferrable=True).execute(make_context())

    assert result["state"] == "queued"
    assert result["uid"] == "uid-created-1"
    assert hook.api_calls() == ["find_jobs", "create_job"]


def test_manifest_from_a_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            apiVersion: kubeflow.org/v1
            kind: PyTorchJob
            metadata:
              name: from-file
            spec:
              pytorchReplicaSpecs:
                Worker:
                  replicas: 3
                  template:
                    spec:
                      containers:
                        - name: pytorch
                          image: file-image:2
            """
        )
    )
    hook = progressing(succeeded_status())
    # A path that reaches execute() unrendered (run outside a DAG run) is read from the DAG's search path only.
    with DAG("files", schedule=None, start_date=datetime(2024, 1, 1), template_searchpath=[str(tmp_path)]):
        operator = make_operator(hook, job_manifest=str(path), image=None, num_workers=None)
    with pytest.raises(InvalidJobSpecError, match="outside the DAG folder"):
        make_operator(hook, job_manifest=str(path), image=None, num_workers=None).execute(make_context())

    operator.execute(make_context())

    manifest = hook.called("create_job")[0][0][1]
    assert manifest["metadata"]["name"].startswith("from-file-")
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] == (
        "file-image:2"
    )


# -- deferrable mode ----------------------------------------------------------------------------------------------


def test_deferrable_defers_to_a_trigger_for_the_submitted_job() -> None:
    connection = ClusterConnection("k8s", "ctx", {"apiVersion": "v1", "kind": "Config"}, {"namespace": "ml"})
    hook = progressing(running_status(), connection=connection)
    started = datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)
    ti = FakeTI(start_date=started)
    operator = make_operator(
        hook,
        deferrable=True,
        execution_timeout=timedelta(hours=2),
        wait_policy=WaitPolicy(
            startup_timeout=timedelta(minutes=30), poll_interval=7, progress_interval=timedelta(minutes=2)
        ),
        cleanup_policy=CleanupPolicy(on_kill=False),
        gpus_per_replica=4,
    )
    # The worker's clock, 20 minutes behind the API server's that stamps creationTimestamp.
    submitted = time.time() - 1200
    operator.clock = ManualClock(submitted)

    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(make_context(ti))

    job = hook.only_job()
    trigger = deferred.value.trigger
    assert isinstance(trigger, TrainingJobTrigger)
    assert (trigger.kind, trigger.name, trigger.namespace, trigger.uid) == (
        "PyTorchJob",
        job["metadata"]["name"],
        "default",
        job["metadata"]["uid"],
    )
    # Counted on one clock, the worker's, from the submission: not from the server's creationTimestamp.
    assert trigger.deadlines.startup == submitted + 1800
    # Airflow 3 does not time a deferred task out by its execution_timeout: the trigger enforces it.
    assert trigger.deadlines.execution == started.timestamp() + 7200
    assert trigger.wait_policy.poll_seconds == 7.0
    assert trigger.wait_policy.progress_seconds == 120.0
    # The watch's view of the job has no spec: the trigger is told what each pod asks for (GPU metrics).
    assert trigger.gpus_per_replica == {"Master": 4, "Worker": 4}
    assert trigger.cleanup_policy.on_kill is False
    assert trigger.connection == connection
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.kwargs == {"job_uid": job["metadata"]["uid"], "reattached": False}
    # The worker only submitted; the trigger does the waiting.
    assert hook.api_calls() == ["find_jobs", "create_job"]
    assert ti.xcoms == {"job_name": job["metadata"]["name"], "job_namespace": "default"}
    json.dumps(trigger.serialize()[1])


def test_deferrable_without_timeouts_has_no_deadlines() -> None:
    hook = progressing(running_status())

    with pytest.raises(TaskDeferred) as deferred:
        make_operator(hook, deferrable=True, wait_policy=WaitPolicy(startup_timeout=None)).execute(make_context())

    trigger = deferred.value.trigger
    assert (trigger.deadlines.startup, trigger.deadlines.execution) == (None, None)


def test_a_job_already_finished_at_submit_is_not_deferred() -> None:
    # The create's reply was lost and the retry saw 409; by the time it is read, the job is done.
    hook = progressing(succeeded_status())
    hook.conflict_after_store = True

    result = make_operator(hook, deferrable=True).execute(make_context())

    assert result["state"] == "succeeded"
    assert "create_job" in hook.api_calls()


def test_execute_complete_success_returns_what_the_sync_path_returns() -> None:
    sync_hook = progressing(running_status(), succeeded_status())
    sync_result = make_operator(sync_hook, job_name="train-abc").execute(make_context())
    finished_job = sync_hook.job("train-abc")
    assert finished_job is not None

    deferred_hook = FakeTrainingJobHook()
    deferred_hook.add_job(finished_job)
    event = trigger_event(finished_job, uid=finished_job["metadata"]["uid"])
    result = make_operator(deferred_hook, job_name="train-abc", deferrable=True).execute_complete(
        make_context(), event, job_uid=finished_job["metadata"]["uid"]
    )

    assert event["status"] == "success"
    assert result == sync_result
    assert deferred_hook.called("delete_job") == []


def test_execute_complete_failure_raises_what_the_sync_path_raises() -> None:
    sync_hook = progressing(running_status(), failed_status())
    add_failing_pods(sync_hook, "train-abc")
    with pytest.raises(JobFailedError) as sync_raised:
        make_operator(sync_hook, job_name="train-abc").execute(make_context())
    failed_job = sync_hook.job("train-abc")
    assert failed_job is not None

    deferred_hook = FakeTrainingJobHook()
    deferred_hook.add_job(failed_job)
    add_failing_pods(deferred_hook, "train-abc")
    event = trigger_event(failed_job, uid="uid-created-1")
    with pytest.raises(JobFailedError) as deferred_raised:
        make_operator(deferred_hook, job_name="train-abc").execute_complete(
            make_context(), event, job_uid="uid-created-1"
        )

    assert event["status"] == "failed"
    assert str(deferred_raised.value) == str(sync_raised.value)
    assert "OOMKilled" in str(deferred_raised.value)
    assert FAILED_REASON in str(deferred_raised.value)


@pytest.mark.parametrize(("delete_on_timeout", "deleted"), [(True, True), (False, False)])
def test_execute_complete_timeout_raises_job_timeout_and_follows_delete_on_timeout(
    delete_on_timeout: bool, deleted: bool
) -> None:
    queued = make_job("train-abc", uid="uid-1", status=queued_status())
    hook = FakeTrainingJobHook()
    hook.add_job(queued)
    event = trigger_event(queued, startup_deadline=0.0)

    with pytest.raises(JobTimeoutError, match="did not start within startup_timeout"):
        make_operator(
            hook, job_name="train-abc", cleanup_policy=CleanupPolicy(on_timeout=delete_on_timeout)
        ).execute_complete(make_context(), event, job_uid="uid-1")

    assert event["status"] == "timeout"
    assert (hook.job("train-abc") is None) == deleted
    if deleted:
        assert hook.called("delete_job")[0][1] == {"uid": "uid-1"}


def test_execute_complete_error_on_the_last_try_deletes_the_running_job() -> None:
    running = make_job("train-abc", uid="uid-1", status=running_status())
    hook = FakeTrainingJobHook()
    hook.add_job(running)
    event = make_outcome(JobRef("PyTorchJob", "train-abc", "default", "uid-1"), ERROR, "lost contact", running)

    with pytest.raises(TrainingJobError) as raised:
        make_operator(hook, job_name="train-abc", retries=0).execute_complete(make_context(), event, job_uid="uid-1")

    assert type(raised.value) is TrainingJobError
    assert "was deleted: this was the task's last try" in str(raised.value)
    assert hook.job("train-abc") is None


def test_execute_complete_error_before_the_last_try_keeps_the_job_for_the_retry() -> None:
    running = make_job("train-abc", uid="uid-1", status=running_status())
    hook = FakeTrainingJobHook()
    hook.add_job(running)
    event = make_outcome(JobRef("PyTorchJob", "train-abc", "default", "uid-1"), ERROR, "lost contact", running)

    with pytest.raises(TrainingJobError):
        make_operator(hook, job_name="train-abc", retries=2).execute_complete(
            make_context(FakeTI(try_number=1)), event, job_uid="uid-1"
        )

    assert hook.job("train-abc") is not None
    assert hook.called("delete_job") == []


def test_execute_complete_never_deletes_a_job_recreated_by_someone_else() -> None:
    """The trigger's event carries the replacement; the task deletes only the job it submitted."""
    replacement = make_job("train-abc", uid="uid-2", status=running_status())
    hook = FakeTrainingJobHook()
    hook.add_job(replacement)
    event = trigger_event(replacement, uid="uid-1")
    assert event["status"] == "error"

    with pytest.raises(TrainingJobError) as raised:
        make_operator(hook, job_name="train-abc", retries=0).execute_complete(make_context(), event, job_uid="uid-1")

    assert "recreated outside this task" in str(raised.value)
    assert "last try" not in str(raised.value)
    assert hook.job("train-abc") is not None
    assert all(kwargs["uid"] == "uid-1" for _, kwargs in hook.called("delete_job"))


def test_execute_complete_of_a_job_that_vanished() -> None:
    hook = FakeTrainingJobHook()
    event = trigger_event(None)

    with pytest.raises(TrainingJobError, match="no longer exists"):
        make_operator(hook, job_name="train-abc").execute_complete(make_context(), event, job_uid="uid-1")


def test_a_timeout_judged_on_a_stale_look_at_a_job_that_succeeded_is_the_tasks_success() -> None:
    """The trigger fired a timeout on its cache; one GET shows the job succeeded: no deletion, a result."""
    running = make_job("train-abc", uid="uid-1", status=running_status())
    event = make_outcome(JobRef("PyTorchJob", "train-abc", "default", "uid-1"), "timeout", "did not finish", running)
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("train-abc", uid="uid-1", status=succeeded_status()))

    result = make_operator(hook, job_name="train-abc").execute_complete(make_context(), event, job_uid="uid-1")

    assert result["state"] == "succeeded"
    assert hook.called("delete_job") == []
    assert hook.job("train-abc") is not None


def test_a_timeout_judged_on_a_stale_look_at_a_job_that_failed_is_the_jobs_failure() -> None:
    running = make_job("train-abc", uid="uid-1", status=running_status())
    event = make_outcome(JobRef("PyTorchJob", "train-abc", "default", "uid-1"), "timeout", "did not finish", running)
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("train-abc", uid="uid-1", status=failed_status()))

    with pytest.raises(JobFailedError, match="train-abc failed"):
        make_operator(hook, job_name="train-abc").execute_complete(make_context(), event, job_uid="uid-1")

    assert hook.called("delete_job") == []


def test_a_deferral_timeout_leaves_a_job_that_has_finished() -> None:
    hook = FakeTrainingJobHook()
    ti = FakeTI()
    hook.add_job(make_job("train-abc", uid="uid-1", status=succeeded_status(), labels=our_labels(ti)))
    ti.xcoms.update(job_name="train-abc", job_namespace="default")

    with pytest.raises(TaskDeferralTimeout):
        make_operator(hook).resume_execution(
            TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, make_context(ti)
        )

    assert hook.called("delete_job") == []


@pytest.mark.parametrize(("delete_on_timeout", "deleted"), [(True, True), (False, False)])
def test_a_deferral_timed_out_by_the_scheduler_deletes_the_job(delete_on_timeout: bool, deleted: bool) -> None:
    hook = FakeTrainingJobHook()
    ti = FakeTI()
    hook.add_job(make_job("train-abc", uid="uid-1", status=running_status(), labels=our_labels(ti)))
    ti.xcoms.update(job_name="train-abc", job_namespace="default")

    with pytest.raises(TaskDeferralTimeout):
        make_operator(hook, cleanup_policy=CleanupPolicy(on_timeout=delete_on_timeout)).resume_execution(
            TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, make_context(ti)
        )

    assert (hook.job("train-abc") is None) == deleted


# -- reattachment ----------------------------------------------------------------------------------------------


def test_reattaches_to_the_job_in_the_task_state_store() -> None:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("train-old", uid="uid-7", status=running_status()), [running_status(), succeeded_status()])
    store = FakeStateStore(
        {STATE_STORE_KEY: {"kind": "PyTorchJob", "name": "train-old", "namespace": "default", "uid": "uid-7"}}
    )
    ti = FakeTI(try_number=2)

    result = make_operator(hook).execute(make_context(ti, store))

    assert result["name"] == "train-old"
    assert result["uid"] == "uid-7"
    assert result["state"] == "succeeded"
    assert hook.called("create_job") == []
    assert ti.xcoms == {"job_name": "train-old", "job_namespace": "default"}


def test_the_state_store_entry_of_a_replaced_job_is_not_followed() -> None:
    hook = progressing(succeeded_status())
    hook.add_job(make_job("train-old", uid="uid-other", status=running_status()))
    store = FakeStateStore(
        {STATE_STORE_KEY: {"kind": "PyTorchJob", "name": "train-old", "namespace": "default", "uid": "uid-7"}}
    )

    result = make_operator(hook).execute(make_context(FakeTI(try_number=2), store))

    assert result["name"] != "train-old"
    assert len(hook.called("create_job")) == 1


def test_reattaches_to_a_running_job_of_an_earlier_try_found_by_label() -> None:
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook()
    hook.add_job(
        make_job("train-old", uid="uid-7", status=running_status(), labels=our_labels(ti, try_number=1)),
        [running_status(), succeeded_status()],
    )

    result = make_operator(hook).execute(make_context(ti))

    assert result["name"] == "train-old"
    assert hook.called("create_job") == []


def test_reattaches_to_the_newest_of_several_running_jobs() -> None:
    ti = FakeTI(try_number=3)
    hook = FakeTrainingJobHook()
    for name, created in (("train-newer", "2024-05-01T12:00:00Z"), ("train-older", "2024-05-01T11:00:00Z")):
        hook.add_job(make_job(name, uid=name, status=running_status(), labels=our_labels(ti), created=created))
    hook.steps[("default", "train-newer")] = [succeeded_status()]

    assert make_operator(hook).execute(make_context(ti))["name"] == "train-newer"


def test_a_finished_job_of_an_earlier_try_is_not_reattached() -> None:
    ti = FakeTI(try_number=2)
    hook = progressing(succeeded_status())
    hook.add_job(make_job("train-old", uid="uid-7", status=failed_status(), labels=our_labels(ti, try_number=1)))

    result = make_operator(hook).execute(make_context(ti))

    assert result["name"] != "train-old"
    assert len(hook.called("create_job")) == 1
    assert hook.job("train-old") is not None  # left for the user to inspect


def test_a_job_of_another_task_instance_is_not_reattached() -> None:
    ti = FakeTI()
    other = FakeTI(run_id="manual__another-run")
    hook = progressing(succeeded_status())
    hook.add_job(make_job("train-old", status=running_status(), labels=our_labels(other)))

    make_operator(hook).execute(make_context(ti))

    assert len(hook.called("create_job")) == 1


def test_explicit_name_that_does_not_exist_is_created() -> None:
    hook = progressing(succeeded_status())

    assert make_operator(hook, job_name="my-job", if_exists="fail").execute(make_context())["name"] == "my-job"


@pytest.mark.parametrize("status", [running_status(), succeeded_status()], ids=["running", "finished"])
def test_explicit_name_with_if_exists_fail(status: dict[str, Any]) -> None:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job("my-job", status=status))

    with pytest.raises(JobAlreadyExistsError, match="if_exists='fail'"):
        make_operator(hook, job_name="my-job", if_exists="fail").execute(make_context())

    assert hook.called("create_job") == []
    assert hook.called("delete_job") == []


def test_explicit_name_with_if_exists_replace_deletes_then_creates() -> None:
    hook = progressing(succeeded_status())
    hook.add_job(make_job("my-job", uid="uid-old", status=running_status()))

    result = make_operator(hook, job_name="my-job", if_exists="replace").execute(make_context())

    assert hook.called("delete_job")[0] == (("PyTorchJob", "my-job", "default"), {"uid": "uid-old"})
    assert result["name"] == "my-job"
    assert result["uid"] == "uid-created-1"
    assert hook.api_calls().index("delete_job") < hook.api_calls().index("create_job")


def test_explicit_name_with_if_exists_reattach_follows_this_task_instances_running_job() -> None:
    hook = FakeTrainingJobHook()
    ti = FakeTI(try_number=2)
    job = make_job("my-job", uid="uid-old", status=running_status(), labels=our_labels(ti))
    hook.add_job(job, [running_status(), succeeded_status()])

    result = make_operator(hook, job_name="my-job", if_exists="reattach").execute(make_context(ti))

    assert result["uid"] == "uid-old"
    assert hook.called("create_job") == []


@pytest.mark.parametrize(
    ("owner", "named"),
    [
        ({"run_id": "backfill__2024-01-01"}, "run 'backfill__2024-01-01'"),
        ({"map_index": 3}, "map index 3"),
        (None, "no Airflow task of this provider"),
    ],
    ids=["another run", "another mapped instance", "no task"],
)
@pytest.mark.parametrize("if_exists", ["reattach", "fail"])
def test_an_explicit_name_holding_another_owners_running_job_is_refused_naming_the_owner(
    owner: dict[str, Any] | None, named: str, if_exists: str
) -> None:
    """A backfill run, or a mapped instance sharing a static name, never adopts (nor deletes) another's job."""
    hook = FakeTrainingJobHook()
    ti = FakeTI()
    labels = our_labels(ti, **owner) if owner is not None else {}
    hook.add_job(make_job("my-job", uid="uid-theirs", status=running_status(), labels=labels))

    with pytest.raises(JobAlreadyExistsError) as raised:
        make_operator(hook, job_name="my-job", if_exists=if_exists).execute(make_context(ti))

    assert "PyTorchJob default/my-job already exists and belongs to " in str(raised.value)
    assert named in str(raised.value)
    assert f"if_exists={if_exists!r}" in str(raised.value)
    assert hook.called("create_job") == hook.called("delete_job") == []


def test_explicit_name_with_if_exists_reattach_replaces_this_task_instances_finished_job() -> None:
    hook = progressing(succeeded_status())
    ti = FakeTI(try_number=2)
    hook.add_job(make_job("my-job", uid="uid-old", status=failed_status(), labels=our_labels(ti)))

    result = make_operator(hook, job_name="my-job", if_exists="reattach").execute(make_context(ti))

    assert result["uid"] == "uid-created-1"
    assert hook.called("delete_job")[0][1] == {"uid": "uid-old"}


def test_a_create_conflict_on_our_own_job_is_a_lost_reply() -> None:
    hook = progressing(running_status(), succeeded_status())
    hook.conflict_after_store = True
    store = FakeStateStore()

    result = make_operator(hook).execute(make_context(store=store))

    assert result["state"] == "succeeded"
    assert len(hook.called("create_job")) == 1
    assert store.values[STATE_STORE_KEY]["uid"] == result["uid"]


def test_a_create_conflict_on_someone_elses_job_fails() -> None:
    hook = FakeTrainingJobHook()
    hook.before_create = lambda manifest: hook.add_job(
        make_job(manifest["metadata"]["name"], uid="uid-theirs", status=running_status())
    )

    with pytest.raises(JobAlreadyExistsError):
        make_operator(hook).execute(make_context())

    assert hook.only_job()["metadata"]["uid"] == "uid-theirs"
    assert hook.called("delete_job") == []


# -- validation ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"image": None}, "spec.pytorchReplicaSpecs.Master.template.spec.containers[pytorch].image"),
        ({"job_name": "Not_A_DNS_Name"}, "metadata.name"),
        ({"job_manifest": "apiVersion: kubeflow.org/v2\nkind: PyTorchJob\n"}, "apiVersion"),
        ({"job_manifest": "spec: [unclosed"}, "job_manifest"),
        ({"job_manifest": "/no/such/manifest.yaml"}, "job_manifest"),
        ({"restart_policy": "Sometimes"}, "spec.pytorchReplicaSpecs.Master.restartPolicy"),
        ({"run_policy": RunPolicy(clean_pod_policy="Some")}, "spec.runPolicy.cleanPodPolicy"),
    ],
)
def test_an_invalid_job_is_rejected_before_any_api_call(kwargs: dict[str, Any], field: str) -> None:
    hook = FakeTrainingJobHook()

    with pytest.raises(InvalidJobSpecError) as raised:
        make_operator(hook, **kwargs).execute(make_context())

    assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: ")
    assert hook.calls == []


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        (lambda: {"if_exists": "x"}, "if_exists"),
        (lambda: {"cleanup_policy": CleanupPolicy(on_finish="x")}, "cleanup_policy.on_finish"),
        (lambda: {"num_workers": 0}, "num_workers"),
        (lambda: {"num_workers": True}, "num_workers"),
        (lambda: {"num_workers": 1.5}, "num_workers"),
        (lambda: {"gpus_per_replica": -1}, "gpus_per_replica"),
        (lambda: {"log_replicas": "bogus"}, "log_replicas"),
        (lambda: {"log_replicas": ["master-0", 3]}, "log_replicas"),
        (lambda: {"wait_policy": WaitPolicy(poll_interval=0)}, "wait_policy.poll_interval"),
        (lambda: {"wait_policy": WaitPolicy(startup_timeout=-5)}, "wait_policy.startup_timeout"),
        (lambda: {"wait_policy": WaitPolicy(progress_interval=0)}, "wait_policy.progress_interval"),
        (lambda: {"run_policy": RunPolicy(backoff_limit=-1)}, "run_policy.backoff_limit"),
        (lambda: {"kind": "SparkJob"}, "kind"),
    ],
)
def test_invalid_parameters_fail_when_the_dag_is_parsed(kwargs: Callable[[], dict[str, Any]], parameter: str) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(parameter)}: "):
        TrainingJobOperator(task_id="train", image="trainer:1", **kwargs())


def test_a_grouped_parameter_given_as_a_dict_is_refused_naming_its_type() -> None:
    with pytest.raises(TypeError, match=r"^wait_policy: expected a WaitPolicy, got dict"):
        TrainingJobOperator(task_id="train", image="trainer:1", wait_policy={"poll_interval": 1})  # type: ignore[arg-type]


def test_dry_run_asks_the_api_server_and_creates_nothing() -> None:
    hook = FakeTrainingJobHook()
    ti = FakeTI()

    result = make_operator(hook, server_dry_run=True).execute(make_context(ti))

    [(args, kwargs)] = hook.called("create_job")
    assert kwargs == {"dry_run": True}
    assert hook.jobs == {}
    assert hook.api_calls() == ["create_job"]
    assert result["name"] == args[1]["metadata"]["name"]
    assert result["state"] == "queued"
    assert ti.pushed == []


def test_templating_covers_the_manifest_and_its_files() -> None:
    assert {"job_manifest", "job_name", "namespace", "image", "command", "args", "env"} <= set(
        TrainingJobOperator.template_fields
    )
    # No field is a file by its suffix; a job_manifest path is (test_base.py).
    assert TrainingJobOperator.template_ext == ()


def test_deferrable_defaults_to_airflows_default_deferrable() -> None:
    """The default is read from the config when the module is imported, hence the fresh interpreter."""
    assert TrainingJobOperator(task_id="t", image="i").deferrable is False

    script = textwrap.dedent(
        """
        from airflow_provider_disttrain import (
            MPIJobOperator, PyTorchJobOperator, TrainingJobOperator, TrainingJobSensor,
        )
        print(
            TrainingJobOperator(task_id="a", image="i").deferrable,
            PyTorchJobOperator(task_id="b", image="i").deferrable,
            MPIJobOperator(task_id="c", image="i").deferrable,
            TrainingJobSensor(task_id="d", job_name="j").deferrable,
            PyTorchJobOperator(task_id="e", image="i", deferrable=False).deferrable,
        )
        """
    )
    env = {**os.environ, "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "true"}
    completed = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip().splitlines()[-1] == "True True True True False"


def test_the_failure_xcom_masks_the_secrets_the_task_log_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.log import mask_secret

    secret = "hf_Zq8sEcReTtOkEn42"
    mask_secret(secret)  # as a connection's password or a sensitive env value is given to the masker
    hook = progressing(running_status(), failed_status())
    crashed = {"reason": "Error", "exitCode": 1, "finishedAt": "2024-05-01T10:01:00Z"}
    hook.pods["train-abc"] = [make_pod("train-abc", "master", 0, phase="Failed", terminated=crashed)]
    hook.logs["train-abc-master-0"] = (
        'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
        f"PermissionError: token {secret} was refused by the hub\n"
    )
    ti = FakeTI()
    context = make_context(ti)
    monkeypatch.setattr("airflow.sdk.get_current_context", lambda: context)

    with pytest.raises(JobFailedError) as raised:
        make_operator(hook, job_name="train-abc").execute(context)

    failure = dict(ti.pushed)["failure"]
    assert "train-abc-master-0: PermissionError: token *** was refused by the hub" in failure["evidence"]
    assert secret not in json.dumps(failure)
    assert raised.value.failure == failure  # what callbacks and lineage read
