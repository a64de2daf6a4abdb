"""MultiKueue: a job dispatched to a worker cluster is followed there (its pods, logs, leader metrics and
failure evidence), through the connection ``worker_clusters`` or the manager connection's extra maps to
the cluster's name; the job itself is read and deleted on the manager. Sync and deferred (``execute_complete``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.exceptions import InvalidJobSpecError, JobFailedError, JobTimeoutError
from airflow_provider_disttrain.job.outcome import SUCCESS, JobRef, make_outcome
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, QUEUE_NAME_LABEL
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy
from airflow_provider_disttrain.ui.view import job_detail
from tests.unit.fakes import (
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

WORKER = "worker-1"
METRICS = {"loss": 0.125, "accuracy": 0.9}


def dispatched_workload(job: dict[str, Any], cluster: str = WORKER) -> dict[str, Any]:
    """Kueue's Workload of ``job``, admitted and dispatched by MultiKueue to ``cluster``."""
    metadata = job["metadata"]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"pytorchjob-{metadata['name']}-1a2b3",
            "namespace": metadata["namespace"],
            "labels": {JOB_UID_LABEL: metadata["uid"]},
            "creationTimestamp": metadata.get("creationTimestamp"),
        },
        "status": {
            "clusterName": cluster,
            "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted"}],
        },
    }


def manager(*statuses: dict[str, Any]) -> FakeTrainingJobHook:
    """The manager cluster: the job goes through ``statuses``; Kueue dispatches it once it exists."""
    hook = FakeTrainingJobHook(progression=statuses, connection=None)
    hook.on_get = lambda _: (
        hook.workloads.append(dispatched_workload(hook.only_job())) if hook.jobs and not hook.workloads else None
    )
    return hook


def add_pods(worker: FakeTrainingJobHook, name: str, *, succeeded: bool) -> None:
    if succeeded:
        done = {"reason": "Completed", "exitCode": 0, "message": json.dumps(METRICS)}
        worker.pods[name] = [make_pod(name, "master", 0, phase="Succeeded", terminated=done)]
    else:
        worker.pods[name] = [make_pod(name, "master", 0, phase="Failed", terminated=OOM_KILLED)]
    worker.logs[f"{name}-master-0"] = "epoch 1 loss=0.5\nepoch 2 loss=0.125\n"


def operator(hook: FakeTrainingJobHook, **kwargs: Any) -> PyTorchJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "image": "trainer:1",
        "job_name": "train-abc",
        "local_queue": "team-a",
        "wait_policy": WaitPolicy(poll_interval=0.01),
    }
    arguments.update(kwargs)
    return with_hook(PyTorchJobOperator(**arguments), hook)


def said(events: list[Any]) -> list[str]:
    return [str(e["event"]) % tuple(e.get("positional_args", ())) for e in events]


def test_a_dispatched_job_is_read_on_its_worker_cluster_through_the_mapped_connection() -> None:
    hook = manager(running_status(), succeeded_status())
    worker = FakeTrainingJobHook()
    add_pods(worker, "train-abc", succeeded=True)
    hook.worker_hooks["k8s_worker_1"] = worker

    with structlog.testing.capture_logs() as logged:
        result = operator(hook, worker_clusters={WORKER: "k8s_worker_1"}).execute(make_context())

    assert result["cluster"] == WORKER and "cluster_note" not in result
    assert result["metrics"] == METRICS  # the leader's termination message, on the worker
    assert "[train-abc-master-0] epoch 2 loss=0.125" in said(logged)
    assert worker.called("list_job_pods") and worker.called("read_pod_log")
    assert not worker.called("get_job") and not worker.called("delete_job")  # the job is the manager's
    json.dumps(result)  # XCom


def test_the_failure_explanation_comes_from_the_workers_pods_and_names_the_cluster() -> None:
    hook = manager(running_status(), failed_status())
    worker = FakeTrainingJobHook()
    add_pods(worker, "train-abc", succeeded=False)
    hook.worker_clusters_value = json.dumps({WORKER: "k8s_worker_1"})  # the manager connection's extra
    hook.worker_hooks["k8s_worker_1"] = worker

    with pytest.raises(JobFailedError) as failed:
        operator(hook).execute(make_context())

    message = str(failed.value)
    assert "OOMKilled" in message
    assert f"runs on worker cluster '{WORKER}' (MultiKueue)" in message
    assert "the extra worker_clusters of connection" in message


def test_an_unmapped_worker_cluster_is_named_in_the_log_and_result_and_the_job_still_followed() -> None:
    hook = manager(running_status(), succeeded_status())

    with structlog.testing.capture_logs() as logged:
        result = operator(hook).execute(make_context())

    assert result["state"] == "succeeded" and result["cluster"] == WORKER
    note = result["cluster_note"]
    assert f"worker cluster '{WORKER}'" in note and "which no connection maps" in note
    assert f"worker_clusters={{'{WORKER}': '<kubernetes connection id>'}}" in note
    assert "connection 'kubernetes_default'" in note  # the manager's, whose extra would map it too
    assert any("which no connection maps" in line for line in said(logged))
    assert "metrics" not in result


def test_the_parameter_wins_over_the_connections_extra_for_the_same_cluster() -> None:
    hook = manager(running_status(), succeeded_status())
    hook.worker_clusters_value = {WORKER: "from_the_extra"}
    chosen = FakeTrainingJobHook()
    add_pods(chosen, "train-abc", succeeded=True)
    hook.worker_hooks["from_the_parameter"] = chosen

    result = operator(hook, worker_clusters={WORKER: "from_the_parameter"}).execute(make_context())

    assert result["metrics"] == METRICS


def test_deferred_the_ending_reads_the_worker_too() -> None:
    hook = manager(succeeded_status())
    worker = FakeTrainingJobHook()
    add_pods(worker, "train-abc", succeeded=True)
    hook.worker_hooks["k8s_worker_1"] = worker
    task = operator(hook, worker_clusters={WORKER: "k8s_worker_1"})
    job = hook.add_job(make_job(labels={QUEUE_NAME_LABEL: "team-a"}, status=succeeded_status()))
    hook.workloads.append(dispatched_workload(job))
    event = make_outcome(JobRef("PyTorchJob", "train-abc", "default", job["metadata"]["uid"]), SUCCESS, "done", job)

    result = task.execute_complete(make_context(), event, job_uid=job["metadata"]["uid"])

    assert result["cluster"] == WORKER and result["metrics"] == METRICS
    assert task.lineage_job(result)["cluster"]["workerCluster"] == WORKER  # the OpenLineage facet


@pytest.mark.parametrize(
    ("mapping", "field"),
    [
        ({"Worker_1": "k8s"}, "worker_clusters"),
        ({WORKER: ""}, f"worker_clusters[{WORKER!r}]"),
        ({WORKER: 3}, f"worker_clusters[{WORKER!r}]"),
        (["worker-1"], "worker_clusters"),
    ],
)
def test_a_bad_mapping_is_refused_at_construction_naming_the_field(mapping: Any, field: str) -> None:
    with pytest.raises(InvalidJobSpecError) as refused:
        PyTorchJobOperator(task_id="train", image="trainer:1", worker_clusters=mapping)

    assert refused.value.field == field


def test_a_bad_connection_extra_is_refused_before_anything_is_sent() -> None:
    hook = manager(running_status(), succeeded_status())
    hook.worker_clusters_value = "{not json"

    with pytest.raises(InvalidJobSpecError) as refused:
        operator(hook).execute(make_context())

    assert refused.value.field == "connection 'kubernetes_default' extra worker_clusters"
    assert not hook.called("create_job")


def test_the_ui_job_view_names_the_worker_cluster() -> None:
    job = make_job(status=running_status())

    assert job_detail(job, now=0.0, workload=dispatched_workload(job))["cluster"] == WORKER
    assert job_detail(job, now=0.0)["cluster"] is None


def test_sync_the_workers_log_lines_are_copied_while_the_job_runs() -> None:
    hook = manager(running_status(), running_status(), running_status(), succeeded_status())
    worker = FakeTrainingJobHook()
    add_pods(worker, "train-abc", succeeded=True)
    hook.worker_hooks["k8s_worker_1"] = worker
    dispatch = hook.on_get
    reads_before_get: list[int] = []  # the worker's log reads before each read of the job on the manager

    def on_get(number: int) -> None:
        reads_before_get.append(len(worker.called("read_pod_log")))
        dispatch(number)

    hook.on_get = on_get

    operator(hook, worker_clusters={WORKER: "k8s_worker_1"}).execute(make_context())

    # The last read of the job saw it succeeded: the worker's log had been read before, while it ran.
    assert hook.called("get_job") and reads_before_get[-1] > 0


@pytest.mark.parametrize("copy_removed", [True, False])
def test_a_timed_out_job_is_deleted_on_the_manager_and_its_workers_copy_checked(copy_removed: bool) -> None:
    hook = manager(queued_status())
    worker = FakeTrainingJobHook()
    hook.worker_hooks["k8s_worker_1"] = worker
    if not copy_removed:  # Kueue has not removed the worker's copy (yet)
        worker.add_job(make_job(uid="uid-of-the-copy", status=running_status()))
    task = operator(
        hook,
        worker_clusters={WORKER: "k8s_worker_1"},
        wait_policy=WaitPolicy(poll_interval=0.01, startup_timeout=0.05),
    )

    with pytest.raises(JobTimeoutError) as raised:
        task.execute(make_context())

    message = str(raised.value)
    assert "was deleted (cleanup_policy.on_timeout=True)" in message
    assert hook.job("train-abc") is None and not worker.called("delete_job")  # deleted on the manager only
    if copy_removed:
        assert f"Its copy on worker cluster '{WORKER}' is gone too." in message
    else:
        assert f"Its copy on worker cluster '{WORKER}' still exists 30s later" in message
        assert worker.job("train-abc") is not None
