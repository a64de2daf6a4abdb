"""A finished job's usage: in the result (both modes), counted once as ``disttrain.gpu_seconds``, recorded on
the job for the jobs page; a refused record never fails the task."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_disttrain.exceptions import JobFailedError, JobTimeoutError
from airflow_provider_disttrain.job.usage import USAGE_ANNOTATION, Usage
from airflow_provider_disttrain.operators.ending import USAGE_COUNTED
from airflow_provider_disttrain.ownership.identity import STATE_STORE_KEY
from airflow_provider_disttrain.parameters import CleanupPolicy
from tests.statsd_listener import StatsdListener
from tests.unit.fakes import (
    END,
    RUNNING_AT,
    FakeStateStore,
    FakeTI,
    FakeTrainingJobHook,
    failed_status,
    make_context,
    make_job,
    make_pod,
    running_status,
    succeeded_status,
)
from tests.unit.operators.test_training_job import make_operator, progressing, trigger_event

NAME = "train-abc"
CREATED = "2024-05-01T09:59:00Z"  # 65 s before the pods started (RUNNING_AT)
RAN_SECONDS = 600.0  # RUNNING_AT to END


def gpu_pods(gpus_per_pod: int = 2) -> list[dict[str, Any]]:
    """A master and a worker, each asking for ``gpus_per_pod`` GPUs, that ran from RUNNING_AT to END."""
    pods = []
    for replica in ("master", "worker"):
        pod = make_pod(
            NAME,
            replica,
            0,
            phase="Succeeded",
            terminated={"reason": "Completed", "exitCode": 0, "startedAt": RUNNING_AT, "finishedAt": END},
        )
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": gpus_per_pod}}
        pods.append(pod)
    return pods


EXPECTED = {"gpus": 4, "gpu_seconds": 4 * RAN_SECONDS, "running_seconds": RAN_SECONDS, "queued_seconds": 65.0}


def created_at(hook: FakeTrainingJobHook, created: str = CREATED) -> FakeTrainingJobHook:
    """The hook, its jobs created at ``created`` (the fake stamps them now)."""
    create = hook.create_job

    def create_then_date(kind: Any, manifest: Any, namespace: str, **kwargs: Any) -> Any:
        job = create(kind, manifest, namespace, **kwargs)
        hook.jobs[(namespace, job["metadata"]["name"])]["metadata"]["creationTimestamp"] = created
        return {**job, "metadata": {**job["metadata"], "creationTimestamp": created}}

    hook.create_job = create_then_date  # type: ignore[method-assign]
    return hook


def test_sync_result_counts_and_records_what_the_pods_held(statsd: StatsdListener) -> None:
    hook = created_at(progressing(running_status(), succeeded_status()))
    hook.pods[NAME] = gpu_pods()

    result = make_operator(hook, job_name=NAME, local_queue="gpu-queue").execute(make_context())

    assert result["usage"] == EXPECTED
    assert json.loads(json.dumps(result)) == result
    statsd.wait_for("disttrain.gpu_seconds")
    assert statsd.counters() == {"disttrain.gpu_seconds": 4 * RAN_SECONDS}
    annotation = (hook.job(NAME) or {})["metadata"]["annotations"][USAGE_ANNOTATION]
    assert Usage.from_annotation(annotation) == Usage(**EXPECTED)
    # The patch names the job's uid: a job created under the name since is not annotated.
    ((_, _, _, patch), _) = hook.called("patch_job")[-1]
    assert patch["metadata"]["uid"] == result["uid"]


def test_deferred_result_has_the_same_usage_from_the_one_listing_of_the_pods() -> None:
    hook = created_at(progressing(running_status(), succeeded_status()))
    hook.pods[NAME] = gpu_pods()
    operator = make_operator(hook, job_name=NAME, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(make_context())
    hook.steps[("default", NAME)] = [succeeded_status()]  # it finishes meanwhile
    # What the real trigger fires once it sees the job finished.
    event = trigger_event(hook.get_job("PyTorchJob", NAME, "default"), name=NAME, uid=deferred.value.kwargs["job_uid"])

    result = operator.execute_complete(make_context(), event, **deferred.value.kwargs)

    assert result["usage"] == EXPECTED
    assert len(hook.called("list_job_pods")) == 1


def test_a_retry_that_takes_the_counted_job_over_does_not_count_it_again(statsd: StatsdListener) -> None:
    hook = FakeTrainingJobHook()
    hook.add_job(make_job(NAME, uid="uid-7", status=running_status(), created=CREATED), [succeeded_status()])
    hook.pods[NAME] = gpu_pods()
    entry = {"kind": "PyTorchJob", "name": NAME, "namespace": "default", "uid": "uid-7"}
    counted = FakeStateStore({STATE_STORE_KEY: {**entry, USAGE_COUNTED: True}})
    not_counted = FakeStateStore({STATE_STORE_KEY: dict(entry)})

    # The first try died after counting; its retry reattaches to the same job, which finished meanwhile.
    result = make_operator(hook).execute(make_context(FakeTI(try_number=2), counted))
    assert result["usage"] == EXPECTED  # the result still says it
    assert statsd.counters() == {}

    # A try that had not counted it yet counts it, and marks it counted.
    make_operator(hook).execute(make_context(FakeTI(try_number=2), not_counted))
    statsd.wait_for("disttrain.gpu_seconds")
    assert statsd.counters() == {"disttrain.gpu_seconds": 4 * RAN_SECONDS}
    assert not_counted.get(STATE_STORE_KEY)[USAGE_COUNTED] is True


def test_a_refused_record_on_the_job_never_fails_the_task() -> None:
    hook = progressing(running_status(), succeeded_status())
    hook.pods[NAME] = gpu_pods()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError("patch refused: no RBAC for patch")

    hook.patch_job = refuse  # type: ignore[method-assign]

    result = make_operator(hook, job_name=NAME).execute(make_context())

    assert result["state"] == "succeeded"
    assert result["usage"]["gpu_seconds"] == 4 * RAN_SECONDS


def test_a_job_deleted_on_success_is_not_annotated_first() -> None:
    hook = progressing(running_status(), succeeded_status())
    hook.pods[NAME] = gpu_pods()

    make_operator(hook, job_name=NAME, cleanup_policy=CleanupPolicy(on_finish="succeeded")).execute(make_context())

    assert hook.called("patch_job") == []
    assert hook.job(NAME) is None


def failed_gpu_pods() -> list[dict[str, Any]]:
    pods = gpu_pods()
    for pod in pods:
        pod["status"]["phase"] = "Failed"
        pod["status"]["containerStatuses"][0]["state"]["terminated"].update(reason="Error", exitCode=1)
    return pods


def test_a_failed_job_held_its_gpus_too_counted_and_recorded_from_the_pods_the_diagnosis_read(
    statsd: StatsdListener,
) -> None:
    hook = progressing(running_status(), failed_status())
    hook.pods[NAME] = failed_gpu_pods()

    with pytest.raises(JobFailedError):
        make_operator(hook, job_name=NAME).execute(make_context())

    statsd.wait_for("disttrain.gpu_seconds")
    assert statsd.counters() == {"disttrain.gpu_seconds": 4 * RAN_SECONDS}
    annotation = (hook.job(NAME) or {})["metadata"]["annotations"][USAGE_ANNOTATION]
    assert Usage.from_annotation(annotation).gpu_seconds == 4 * RAN_SECONDS  # type: ignore[union-attr]


def test_a_timed_out_job_is_counted_until_the_task_ends_and_not_recorded_on_the_job_it_deletes(
    statsd: StatsdListener,
) -> None:
    hook = progressing(running_status())
    hook.pods[NAME] = gpu_pods()  # (what they held by the end, whatever the clock says then)

    with pytest.raises(JobTimeoutError, match="was deleted"):
        make_operator(hook, job_name=NAME, execution_timeout=timedelta(seconds=30)).execute(make_context())

    statsd.wait_for("disttrain.gpu_seconds")
    assert statsd.counters() == {"disttrain.gpu_seconds": 4 * RAN_SECONDS}
    assert hook.called("patch_job") == []
