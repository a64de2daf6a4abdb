"""What the UI shows about a job, built from the status fixtures (jobs as the operators report them)."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.ownership.naming import task_instance_labels
from airflow_provider_disttrain.ui import view

STATUS = Path(__file__).resolve().parents[2] / "fixtures" / "status"
NOW = datetime(2024, 5, 14, 9, 20, 3, tzinfo=timezone.utc).timestamp()
LABELS = task_instance_labels("retrain", "train", "manual__2024-05-14T09:12:00+00:00", -1, 1)


def fixture(name: str, *, gpus: int = 0, queue: str | None = None) -> dict[str, Any]:
    """A status fixture as the provider's task would have created it: its labels, ``gpus`` per pod."""
    job = yaml.safe_load((STATUS / name).read_text())
    job["metadata"]["labels"] = {**LABELS, **({"kueue.x-k8s.io/queue-name": queue} if queue else {})}
    for replica in (job.get("spec") or {}).get("pytorchReplicaSpecs", {}).values():
        for container in replica["template"]["spec"]["containers"]:
            container["resources"] = {"limits": {"nvidia.com/gpu": gpus, "cpu": "4"}}
    return job


def test_a_running_job_shows_its_replicas_gpus_and_progress():
    job = fixture("pytorchjob-running.yaml", gpus=2)
    detail = view.job_detail(job, now=NOW)
    assert detail["state"] == "running"
    assert detail["replicas"] == [
        {"type": "Master", "desired": 1, "active": 1, "succeeded": 0, "failed": 0, "gpus_per_replica": 2},
        {"type": "Worker", "desired": 1, "active": 1, "succeeded": 0, "failed": 0, "gpus_per_replica": 2},
    ]
    assert detail["gpus_held"] == 4
    # The progress line is the waiter's: the status module's state line and the replica counters.
    assert detail["progress"] == (
        "running (Running - PyTorchJobRunning: PyTorchJob kubeflow/pytorch-simple is running.)"
        " | replicas Master: 1 active; Worker: 1 active"
    )
    assert [(s["step"], s["time"]) for s in detail["timeline"]] == [
        ("created", "2024-05-14T09:12:03Z"),
        ("running", "2024-05-14T09:12:31Z"),
        ("finished", None),
    ]
    assert detail["queued_seconds"] == 28.0
    assert detail["running_seconds"] == 452.0  # 09:12:31 until NOW, 09:20:03
    assert detail["failure"] is None


def test_a_finished_job_holds_no_gpus_and_its_timeline_ends():
    job = fixture("pytorchjob-succeeded.yaml", gpus=2)
    detail = view.job_detail(job, now=NOW)
    assert detail["state"] == "succeeded"
    assert detail["gpus_held"] == 0
    assert detail["timeline"][-1]["step"] == "succeeded" and detail["timeline"][-1]["time"]
    assert detail["running_seconds"] is not None and detail["running_seconds"] > 0


def test_a_failed_job_shows_the_failure_its_condition_gives():
    detail = view.job_detail(fixture("pytorchjob-failed.yaml"), now=NOW)
    assert detail["state"] == "failed"
    assert detail["failure"]["reason"]
    failed = next(
        c
        for c in yaml.safe_load((STATUS / "pytorchjob-failed.yaml").read_text())["status"]["conditions"]
        if c["type"] == "Failed"
    )
    assert detail["failure"] == {"reason": failed["reason"], "message": failed["message"]}


def test_a_job_held_by_kueue_shows_the_queue_and_the_reason_it_waits():
    job = fixture("pytorchjob-suspended.yaml", gpus=1, queue="gpu-queue")
    workload = {
        "metadata": {"name": "pytorchjob-mnist-1a2b3"},
        "status": {
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "False",
                    "reason": "Pending",
                    "message": "couldn't assign flavors to pod set worker: insufficient quota",
                }
            ]
        },
    }
    detail = view.job_detail(job, now=NOW, workload=workload)
    assert detail["state"] == "suspended"
    assert detail["held_by_kueue"] is True and detail["queue"] == "gpu-queue"
    assert detail["waiting"] == "couldn't assign flavors to pod set worker: insufficient quota"
    assert detail["gpus_held"] == 0
    steps = [s["step"] for s in detail["timeline"]]
    assert steps == ["created", "queued", "admitted", "running", "finished"]


def test_a_train_job_reads_its_nodes_from_the_trainer_spec():
    job = yaml.safe_load((STATUS / "trainjob-running.yaml").read_text())
    job["metadata"]["labels"] = LABELS
    job["spec"].setdefault("trainer", {})["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": "8"}}
    rows = view.replicas(JobView.of(job))
    assert [row["type"] for row in rows] == ["node"]
    assert rows[0]["gpus_per_replica"] == 8
    assert view.gpus_held(JobView.of(job)) == rows[0]["active"] * 8


def test_the_view_carries_no_pod_template_nor_env_values():
    job = fixture("pytorchjob-running.yaml")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "HF_TOKEN", "value": "hf_secret_value"}
    ]
    assert "hf_secret_value" not in repr(view.job_detail(job, now=NOW))
    assert "hf_secret_value" not in repr(view.job_summary(job, now=NOW))


def test_the_newest_job_of_a_task_instance_is_its_latest_try():
    first = fixture("pytorchjob-failed.yaml")
    retry = copy.deepcopy(fixture("pytorchjob-running.yaml"))
    retry["metadata"]["creationTimestamp"] = "2030-01-01T00:00:00Z"
    other = fixture("pytorchjob-succeeded.yaml")
    other["metadata"]["labels"] = task_instance_labels("retrain", "evaluate", "r", -1, 1)
    key = LABELS["disttrain.airflow.apache.org/task-instance"]
    assert view.newest_job_of([retry, first, other], key) is retry
    assert view.newest_job_of([other], key) is None


def test_the_page_totals_gpus_per_namespace_and_queue_and_links_each_job():
    running = fixture("pytorchjob-running.yaml", gpus=2, queue="gpu-queue")
    other = fixture("pytorchjob-running.yaml", gpus=1)
    other["metadata"]["name"] = "pytorch-nightly"
    other["metadata"]["labels"] = task_instance_labels("nightly", "train", "scheduled__x", 3, 1)
    done = fixture("pytorchjob-succeeded.yaml", gpus=8)
    done["metadata"]["name"] = "pytorch-done"
    rows = [view.job_summary(job, now=NOW) for job in (running, other, done)]
    # Airflow's task instances: the labels hold the run id sanitized (':' and '+' become '_').
    tis = [("retrain", "train", "manual__2024-05-14T09:12:00+00:00", -1), ("nightly", "train", "scheduled__x", 3)]
    result = view.page(view.link_task_instances(rows, tis))
    assert [(j["name"], j["gpus_held"], j["task_instance"]["run_id"]) for j in result["jobs"]] == [
        ("pytorch-done", 0, "manual__2024-05-14T09:12:00+00:00"),
        ("pytorch-nightly", 2, "scheduled__x"),
        ("pytorch-simple", 4, "manual__2024-05-14T09:12:00+00:00"),
    ]
    assert result["jobs"][1]["task_instance"]["map_index"] == 3
    assert result["gpus_per_namespace"] == {"kubeflow": 6}
    assert result["gpus_per_queue"] == {"kubeflow/gpu-queue": 4}
    unlinked = view.link_task_instances(rows, [])
    assert {j["task_instance"]["run_id"] for j in unlinked} == {None}


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"state": "running", "namespace": None, "dag_id": None}, ["retrain"]),
        ({"state": None, "namespace": None, "dag_id": "nightly"}, ["nightly"]),
        ({"state": None, "namespace": "elsewhere", "dag_id": None}, []),
        ({"state": None, "namespace": None, "dag_id": None}, ["retrain", "nightly"]),
    ],
)
def test_filters_and_dag_access_select_rows(filters, expected):
    running = fixture("pytorchjob-running.yaml")
    done = fixture("pytorchjob-succeeded.yaml")
    done["metadata"]["labels"] = task_instance_labels("nightly", "train", "r", -1, 1)
    rows = [view.job_summary(job, now=NOW) for job in (running, done)]
    shown = [row["task_instance"]["dag_id"] for row in rows if view.matches(row, **filters)]
    assert shown == expected
    assert [row["task_instance"]["dag_id"] for row in view.readable(rows, {"nightly"})] == ["nightly"]
    assert view.readable(rows, set()) == []


PODS = STATUS.parent / "pods"


def test_the_pods_give_each_replica_types_restarts_and_each_pods_problem():
    job = fixture("pytorchjob-running.yaml")
    crashing = yaml.safe_load((PODS / "crashloopbackoff.yaml").read_text())  # worker-1, 4 restarts
    oom = yaml.safe_load((PODS / "oomkilled.yaml").read_text())  # master-0
    detail = view.job_detail(job, now=NOW, pods=[crashing, oom])
    assert {row["type"]: row["restarts"] for row in detail["replicas"]} == {"Master": 0, "Worker": 4}
    rows = {row["replica"]: row for row in detail["pods"]}
    assert set(rows) == {"master-0", "worker-1"}
    assert rows["worker-1"]["restarts"] == 4 and rows["worker-1"]["phase"] == "Running"
    assert any("CrashLoopBackOff" in problem for problem in rows["worker-1"]["problems"])
    assert any("OOMKilled" in problem for problem in rows["master-0"]["problems"])
    assert detail["log"] is None
    tail = {"pod": "pytorch-simple-master-0", "lines": ["epoch 3/10 loss 0.41"]}
    assert view.job_detail(job, now=NOW, pods=[crashing], log=tail)["log"] == tail
    # Without the pods read, no restart column is claimed.
    assert "restarts" not in view.job_detail(job, now=NOW)["replicas"][0]


def test_the_newest_warning_events_come_first():
    events = [
        {
            "type": "Warning",
            "reason": "BackOff",
            "message": f"back-off {i}",
            "count": i,
            "involvedObject": {"name": "pytorch-simple-worker-1"},
            "lastTimestamp": f"2024-05-14T09:1{i}:00Z",
        }
        for i in range(8)
    ]
    shown = view.job_detail(fixture("pytorchjob-running.yaml"), now=NOW, events=events)["events"]
    assert [event["message"] for event in shown] == [
        "back-off 7",
        "back-off 6",
        "back-off 5",
        "back-off 4",
        "back-off 3",
    ]
    assert shown[0] == {
        "object": "pytorch-simple-worker-1",
        "reason": "BackOff",
        "message": "back-off 7",
        "count": 7,
        "time": "2024-05-14T09:17:00Z",
    }


def test_an_event_count_that_is_no_number_is_shown_as_one():
    events = [{"type": "Warning", "reason": "r", "message": "m", "count": "<img src=x>", "lastTimestamp": "t"}]
    assert [row["count"] for row in view.warning_events(events)] == [1]


@pytest.mark.parametrize(("quantity", "gpus"), [(2, 2), ("2", 2), ("2E0", 2), ("1000m", 1), ("500m", 1), ("x", 0)])
def test_gpu_limits_are_read_as_kubernetes_quantities(quantity: Any, gpus: int) -> None:
    job = fixture("pytorchjob-running.yaml")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": quantity}}
    assert [row["gpus_per_replica"] for row in view.replicas(JobView.of(job))] == [gpus, gpus]


def test_the_tab_finds_its_instances_job_of_this_deployment_or_of_before_the_label_never_anothers() -> None:
    from airflow_provider_disttrain.ownership.naming import (
        legacy_task_instance_key,
        task_instance_key,
        task_instance_labels,
    )

    def job(name: str, labels: dict[str, str], created: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": labels, "creationTimestamp": created}}

    ours = task_instance_labels("etl", "train", "r1", -1, 1, deployment_id="staging")
    theirs = task_instance_labels("etl", "train", "r1", -1, 1, deployment_id="prod")
    legacy = {key: value for key, value in ours.items() if key != "disttrain.airflow.apache.org/deployment"} | {
        "disttrain.airflow.apache.org/task-instance": legacy_task_instance_key("etl", "train", "r1", -1)
    }
    key = task_instance_key("etl", "train", "r1", -1, "staging")
    old_key = legacy_task_instance_key("etl", "train", "r1", -1)

    # Prod's job is newer, and carries the legacy key's inputs too: never this deployment's tab's.
    prods = job("prod", theirs, "2026-12-05T10:00:00Z")
    assert view.newest_job_of([prods], key, old_key) is None
    assert (
        view.newest_job_of([job("old", legacy, "2026-12-05T09:00:00Z"), prods], key, old_key)["metadata"]["name"]
        == "old"
    )
    found = view.newest_job_of(
        [job("old", legacy, "2026-12-05T09:00:00Z"), job("new", ours, "2026-12-05T09:30:00Z"), prods], key, old_key
    )
    assert found is not None and found["metadata"]["name"] == "new"


def test_the_tab_shows_what_the_pods_held_so_far_and_the_record_once_finished():
    from airflow_provider_disttrain.job.usage import USAGE_ANNOTATION, Usage

    job = fixture("pytorchjob-running.yaml", gpus=2)
    started = datetime(2024, 5, 14, 9, 12, 33, tzinfo=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods = [
        view.pod_read(
            {
                "metadata": {"name": f"pytorch-simple-{replica}-0"},
                "spec": {"containers": [{"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 2}}}]},
                "status": {"phase": "Running", "containerStatuses": [{"state": {"running": {"startedAt": started}}}]},
            }
        )
        for replica in ("master", "worker")
    ]

    live = view.job_detail(job, now=NOW, pods=pods)["usage"]

    # Created 09:12:03, the pods started 09:12:33 and run until NOW (09:20:03): 450 s, 2 GPUs each.
    assert live == {"gpus": 4, "gpu_seconds": 4 * 450.0, "running_seconds": 450.0, "queued_seconds": 30.0}
    assert view.job_detail(job, now=NOW)["usage"] is None  # no pods read, no record: nothing says
    recorded = Usage(gpus=4, gpu_seconds=99.0, running_seconds=25.0, queued_seconds=1.0)
    job["metadata"]["annotations"] = {USAGE_ANNOTATION: recorded.annotation()}
    assert view.job_detail(job, now=NOW, pods=pods)["usage"] == recorded.as_dict()
    assert view.job_summary(job, now=NOW)["gpu_seconds"] == 99.0
