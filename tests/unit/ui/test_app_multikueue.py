"""The task's tab for a job MultiKueue dispatched to a worker cluster: the cluster is named, and its pods,
Warning events and log tail are read on the worker that the UI connection's extra ``worker_clusters`` maps."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, QUEUE_NAME_LABEL
from airflow_provider_disttrain.ui import app as ui_app
from tests.unit.fakes import FakeTrainingJobHook, make_pod
from tests.unit.ui.test_app import fake_cluster, running_job, settings  # noqa: F401  (the fixture)


def dispatched(monkeypatch: pytest.MonkeyPatch, extra: Any) -> tuple[ui_app.Cluster, dict[str, Any]]:
    """A queued job whose Workload MultiKueue dispatched to ``worker-1``; the UI connection's extra ``extra``."""
    job = running_job("job-a", "etl")
    job["metadata"]["labels"][QUEUE_NAME_LABEL] = "team-a"
    state = fake_cluster(monkeypatch, [job])
    uid = job["metadata"]["uid"]
    workload = {"metadata": {"labels": {JOB_UID_LABEL: uid}}, "status": {"clusterName": "worker-1"}}
    monkeypatch.setattr(state.hook, "find_workload", lambda namespace, job_uid: copy.deepcopy(workload))
    monkeypatch.setattr(state.hook, "worker_clusters_extra", lambda: extra)
    return state, job


def test_the_tab_reads_the_pods_on_the_mapped_worker_and_names_it(
    settings: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, job = dispatched(monkeypatch, {"worker-1": "k8s_worker_1"})
    worker = FakeTrainingJobHook(namespace="ml")
    worker.pods["job-a"] = [make_pod("job-a", "master", 0, namespace="ml")]
    worker.logs["job-a-master-0"] = "epoch 7 on the worker\n"
    state._workers["k8s_worker_1"] = worker  # type: ignore[assignment]  # the worker's hook, faked

    (found,) = state.pods_and_events.jobs("ml", "PyTorchJob/job-a")
    detail = ui_app.view.job_detail(
        job, now=0, pods=found["pods"], events=found["events"], log=found["log"], cluster=found["cluster"]
    )

    assert detail["cluster"] == "worker-1"
    assert [pod["metadata"]["name"] for pod in found["pods"]] == ["job-a-master-0"]
    assert detail["log"]["lines"] == ["epoch 7 on the worker"]
    assert worker.called("list_job_pods")


def test_an_unmapped_worker_is_named_and_nothing_is_read_on_this_cluster_for_its_pods(
    settings: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, _ = dispatched(monkeypatch, None)
    monkeypatch.setattr(state.hook, "list_job_pods", lambda *args, **kwargs: pytest.fail("pods read on the manager"))

    (found,) = state.pods_and_events.jobs("ml", "PyTorchJob/job-a")

    assert found["cluster"] == "worker-1"
    assert found["pods"] == [] and found["log"] is None
