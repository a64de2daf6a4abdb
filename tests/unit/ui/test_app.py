"""The UI's FastAPI app, real, behind fakes of Airflow's auth and database and of the cluster: who sees which
jobs, what is masked and cached, and that a cluster that never answers cannot hold a request."""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from airflow_provider_disttrain.ownership.naming import task_instance_labels
from airflow_provider_disttrain.ui import app as ui_app

STATUS = Path(__file__).resolve().parents[2] / "fixtures" / "status"
SECRET = "hf_0123456789abcdef"


def running_job(name: str, dag_id: str, *, gpus: Any = 1) -> dict[str, Any]:
    """A running PyTorchJob as the provider's task for ``dag_id`` made it, its pods asking ``gpus`` each."""
    job = yaml.safe_load((STATUS / "pytorchjob-running.yaml").read_text())
    job["metadata"].update(name=name, namespace="ml", labels=task_instance_labels(dag_id, "train", "r1", -1, 1))
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        for container in replica["template"]["spec"]["containers"]:
            container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
            container["env"] = [{"name": "HF_TOKEN", "value": SECRET}, {"name": "EPOCHS", "value": "3"}]
    return job


class FakeSession:
    """Airflow's database as the route reads it: the DAG ids it knows; no task instances."""

    def __init__(self, dag_ids: list[str]) -> None:
        self.dag_ids = dag_ids

    def scalars(self, _statement: Any) -> Any:
        return type("Rows", (), {"all": lambda _self: list(self.dag_ids)})()

    def execute(self, _statement: Any) -> Any:
        return type("Rows", (), {"all": lambda _self: []})()

    def close(self) -> None:
        pass


class FakeAuthManager:
    def __init__(self, readable: set[str]) -> None:
        self.readable = readable

    def get_authorized_dag_ids(self, **_kwargs: Any) -> set[str]:
        return set(self.readable)


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The UI's settings (one namespace, one kind, no shared cache, a 1 s budget); a fresh ``Cluster``."""
    for option, value in {
        "UI_CONN_ID": "disttrain_ui_test",
        "UI_NAMESPACES": "ml",
        "UI_KINDS": "PyTorchJob",
        "UI_CACHE_DIR": "none",
        "UI_REQUEST_TIMEOUT": "1",
    }.items():
        monkeypatch.setenv(f"AIRFLOW__DISTTRAIN__{option}", value)
    ui_app._cluster.cache_clear()
    yield
    ui_app._cluster.cache_clear()


def connect_to(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
        "current-context": "c",
    }
    connection = {"conn_type": "kubernetes", "extra": {"kube_config": json.dumps(kubeconfig)}}
    monkeypatch.setenv("AIRFLOW_CONN_DISTTRAIN_UI_TEST", json.dumps(connection))


def client_for(monkeypatch: pytest.MonkeyPatch, readable: set[str], known: list[str]) -> TestClient:
    """The plugin's app, its user allowed to read the DAGs ``readable`` of the ``known`` ones."""
    from airflow.api_fastapi import app as airflow_app
    from airflow.api_fastapi.common.db.common import _get_session
    from airflow.api_fastapi.core_api.security import get_user

    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: FakeAuthManager(readable))
    app = ui_app.create_app()
    app.dependency_overrides[get_user] = lambda: object()
    app.dependency_overrides[_get_session] = lambda: FakeSession(known)
    return TestClient(app)


def fake_cluster(monkeypatch: pytest.MonkeyPatch, jobs: list[dict[str, Any]]) -> ui_app.Cluster:
    """The process's ``Cluster``, its hook answering from ``jobs`` (one pod each, a Warning event, a log)."""
    connect_to(monkeypatch, 1)  # never dialled: every read below is faked
    state = ui_app.cluster()
    hook = state.hook
    monkeypatch.setattr(hook, "find_jobs", lambda kind, namespace, labels: copy.deepcopy(jobs))
    monkeypatch.setattr(hook, "get_job", lambda kind, name, namespace: copy.deepcopy(jobs[0]))
    pod = {
        "metadata": {
            "name": "job-a-master-0",
            "namespace": "ml",
            "labels": {"training.kubeflow.org/replica-type": "master"},
        },
        "spec": {"containers": [{"name": "pytorch", "env": [{"name": "DB_PASSWORD", "value": "p4ssw0rd-from-pod"}]}]},
        "status": {"phase": "Running"},
    }
    monkeypatch.setattr(hook, "list_job_pods", lambda name, namespace, kind: [copy.deepcopy(pod)])
    event = {"type": "Warning", "reason": "BackOff", "message": f"token {SECRET} refused", "count": 2}
    monkeypatch.setattr(
        hook,
        "list_warning_events",
        lambda namespace, names: [dict(event, involvedObject={"name": n}) for n in sorted(names)],
    )
    lines = f"loading with {SECRET}\nconnecting with p4ssw0rd-from-pod\nepoch 1"
    monkeypatch.setattr(hook, "read_pod_log", lambda *args, **kwargs: lines)
    return state


def test_colliding_dag_ids_do_not_see_each_others_jobs(settings: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # "etl" and "_etl" give the same DAG-id label ("etl"); 64-character ids sharing 63 do too.
    long_a, long_b = "x" * 63 + "a", "x" * 63 + "b"
    fake_cluster(
        monkeypatch,
        [
            running_job("job-etl", "etl"),
            running_job("job-under", "_etl"),
            running_job("job-la", long_a),
            running_job("job-lb", long_b),
        ],
    )
    known = ["etl", "_etl", long_a, long_b]

    for readable, expected in (
        ({"etl"}, {("job-etl", "etl")}),
        ({"_etl"}, {("job-under", "_etl")}),
        ({long_b}, {("job-lb", long_b)}),
        (set(), set()),
    ):
        answer = client_for(monkeypatch, readable, known).get("/api/jobs")
        assert answer.status_code == 200, answer.text
        assert {(row["name"], row["task_instance"]["dag_id"]) for row in answer.json()["jobs"]} == expected
        assert answer.json()["gpus_per_namespace"] == ({"ml": 2} if expected else {})


def test_a_job_made_before_the_dag_key_label_is_shown_only_when_its_label_names_one_dag(
    settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy = running_job("job-old", "etl")
    del legacy["metadata"]["labels"]["disttrain.airflow.apache.org/dag-key"]
    fake_cluster(monkeypatch, [legacy])

    alone = client_for(monkeypatch, {"etl"}, ["etl"]).get("/api/jobs").json()["jobs"]
    assert [(row["name"], row["task_instance"]["dag_id"]) for row in alone] == [("job-old", "etl")]
    # Once "_etl" exists the label "etl" could be either DAG's: nobody is shown the job.
    assert client_for(monkeypatch, {"etl"}, ["etl", "_etl"]).get("/api/jobs").json()["jobs"] == []
    assert client_for(monkeypatch, {"etl", "_etl"}, ["etl", "_etl"]).get("/api/jobs").json()["jobs"] == []


def test_a_gpu_quantity_written_unusually_counts_as_kubernetes_reads_it(
    settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_cluster(
        monkeypatch, [running_job("job-milli", "etl", gpus="1000m"), running_job("job-exp", "etl", gpus="2E0")]
    )
    answer = client_for(monkeypatch, {"etl"}, ["etl"]).get("/api/jobs")
    assert answer.status_code == 200, answer.text
    # Each job: Master and Worker, one active pod each.
    assert {row["name"]: row["gpus_held"] for row in answer.json()["jobs"]} == {"job-milli": 2, "job-exp": 4}


def test_what_the_tab_shows_is_masked_and_what_is_cached_holds_no_env(
    settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = running_job("job-a", "etl")
    job["status"]["conditions"][-1]["message"] = f"restarted: HF_TOKEN={SECRET} rejected"
    state = fake_cluster(monkeypatch, [job])

    (cached,) = state.cache.jobs("ml", "PyTorchJob")
    (found,) = state.pods_and_events.jobs("ml", "PyTorchJob/job-a")
    stored = json.dumps([cached, found])
    assert SECRET not in stored and "p4ssw0rd-from-pod" not in stored
    assert '"env"' not in stored and "last-applied" not in stored

    detail = ui_app.view.job_detail(cached, now=0, pods=found["pods"], events=found["events"], log=found["log"])
    assert detail["log"]["lines"] == ["loading with ***", "connecting with ***", "epoch 1"]
    assert detail["events"][0]["message"] == "token *** refused"
    assert any("HF_TOKEN=*** rejected" in c["message"] for c in detail["conditions"])
    assert SECRET not in json.dumps(detail)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A server on 127.0.0.1 that accepts every connection and never answers; its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()
    for connection in accepted:
        connection.close()


def test_a_cluster_that_never_answers_gets_a_504_within_the_budget(
    settings: None, monkeypatch: pytest.MonkeyPatch, silent_server: int
) -> None:
    connect_to(monkeypatch, silent_server)
    client = client_for(monkeypatch, {"etl"}, ["etl"])
    answers: list[Any] = []
    # Several viewers at once: one LISTs (and times out), the others wait for it, for a bounded time.
    requests = [threading.Thread(target=lambda: answers.append(client.get("/api/jobs"))) for _ in range(4)]
    for request in requests:
        request.start()
    for request in requests:
        request.join(30)  # far beyond the 1 s budget and tenacity's backoff: only a hung request stays
    assert len(answers) == 4, "a request to the UI is still waiting for a cluster that never answers"
    assert {answer.status_code for answer in answers} <= {502, 504}
    assert any(answer.status_code == 504 and "did not answer within 1 s" in answer.text for answer in answers)


def test_the_page_shows_this_deployments_jobs_and_older_unlabelled_ones_never_another_deployments(
    settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Staging and prod run the same DAG against one namespace: the same DAG, task and run ids.
    prod, staging = running_job("job-prod", "etl"), running_job("job-staging", "etl")
    prod["metadata"]["labels"] = task_instance_labels("etl", "train", "r1", -1, 1, deployment_id="prod")
    staging["metadata"]["labels"] = task_instance_labels("etl", "train", "r1", -1, 1, deployment_id="staging")
    older = running_job("job-older", "etl")  # made before the deployment label existed
    del older["metadata"]["labels"]["disttrain.airflow.apache.org/deployment"]
    fake_cluster(monkeypatch, [prod, staging, older])
    monkeypatch.setenv("AIRFLOW__DISTTRAIN__DEPLOYMENT_ID", "staging")

    answer = client_for(monkeypatch, {"etl"}, ["etl"]).get("/api/jobs")

    assert answer.status_code == 200, answer.text
    assert {row["name"] for row in answer.json()["jobs"]} == {"job-staging", "job-older"}


def held_job(name: str, dag_id: str, uid: str) -> dict[str, Any]:
    """A job Kueue holds in LocalQueue team-q (the queue label, suspended)."""
    job = running_job(name, dag_id)
    job["metadata"]["uid"] = uid
    job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-q"
    job["status"] = {"conditions": [{"type": "Suspended", "status": "True", "reason": "PyTorchJobSuspended"}]}
    return job


def kueue_workload(name: str, job_uid: str, admitted_seconds_ago: float | None = None) -> dict[str, Any]:
    workload: dict[str, Any] = {
        "metadata": {"name": name, "uid": f"wl-{name}", "labels": {"kueue.x-k8s.io/job-uid": job_uid}},
        "spec": {"queueName": "team-q"},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "message": f"token {SECRET}"}]},
    }
    if admitted_seconds_ago is not None:
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - admitted_seconds_ago))
        workload["status"] = {
            "admission": {"clusterQueue": "gpu-a"},
            "conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": at}],
        }
    return workload


def test_the_page_says_where_each_held_job_waits_and_when_it_may_start(
    settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = fake_cluster(monkeypatch, [held_job("job-waits", "etl", "uid-w"), running_job("job-runs", "etl")])
    workloads = [kueue_workload(f"done-{i}", f"uid-{i}", admitted_seconds_ago=300 + 600 * i) for i in range(3)]
    workloads.append(kueue_workload("wl-waits", "uid-w"))
    listed: list[str] = []
    monkeypatch.setattr(state.hook, "list_workloads", lambda namespace: listed.append(namespace) or workloads)
    summary = {
        "items": [
            {"metadata": {"name": "wl-ahead"}},
            {"metadata": {"name": "wl-waits"}, "positionInLocalQueue": 1, "positionInClusterQueue": 1},
        ]
    }
    monkeypatch.setattr(state.hook, "pending_workloads", lambda namespace, queue: summary)

    client = client_for(monkeypatch, {"etl"}, ["etl"])
    rows = {row["name"]: row for row in client.get("/api/jobs").json()["jobs"]}
    client.get("/api/jobs")  # a second viewer: served from the cache

    assert rows["job-runs"]["wait"] is None
    assert rows["job-waits"]["wait"] == {
        "position": 2,
        "estimate_seconds": 1200.0,
        "explanation": "position 2 in ClusterQueue gpu-a; 3 admissions there in the last 30 min, about one every "
        "10 min: about 20 min",
    }
    assert listed == ["ml"]  # one LIST of the namespace's Workloads per ui_cache_seconds, for everyone
    (cached,) = [entry for entry in state.kueue.jobs("ml", "workloads") if entry["metadata"]["name"] == "wl-waits"]
    assert SECRET not in json.dumps(cached)  # the cache keeps no condition's message


def test_the_visibility_get_of_the_ui_is_bounded_by_the_requests_budget(
    settings: None, monkeypatch: pytest.MonkeyPatch, silent_server: int
) -> None:
    connect_to(monkeypatch, silent_server)
    state = ui_app.cluster()
    raised: list[BaseException] = []

    def ask() -> None:
        with state.budget.started(0.5):
            try:
                state.hook.pending_workloads("ml", "team-q")
            except BaseException as error:
                raised.append(error)

    request = threading.Thread(target=ask, daemon=True)
    request.start()
    request.join(10)  # far beyond the budget: only an unbounded GET is still waiting
    assert not request.is_alive(), "the UI's GET of Kueue's visibility API waits without a bound"
    assert raised and isinstance(raised[0], ui_app.NoAnswer)


def test_every_read_of_the_jobs_adds_the_trainers_new_report_to_the_chart(
    settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__DISTTRAIN__UI_CACHE_SECONDS", "0.001")
    job = yaml.safe_load((STATUS / "trainjob-running-progress.yaml").read_text())
    job["metadata"].update(namespace="ml", labels=task_instance_labels("etl", "train", "r1", -1, 1))
    state = fake_cluster(monkeypatch, [job])
    losses = []
    for second, loss in ((10, "0.9"), (20, "0.7"), (30, "0.5")):
        job["status"]["trainerStatus"].update(
            lastUpdatedTime=f"2026-12-02T07:40:{second}Z", metrics=[{"name": "loss", "value": loss}]
        )
        wait_for_new_list = state.cache.lists
        while state.cache.lists == wait_for_new_list:  # the LIST of at most 1 ms ago is served until then
            (read,) = state.jobs(["ml"])
        losses = [point["values"]["loss"] for point in state.history.chart(read)["points"]]
    assert losses == [0.9, 0.7, 0.5]


def test_the_page_shows_each_jobs_recorded_gpu_seconds_and_totals_without_reading_pods(
    settings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_provider_disttrain.job.usage import USAGE_ANNOTATION, Usage

    recorded = {"a": 7200.0, "b": 1800.5}
    jobs = [running_job(f"job-{name}", "etl") for name in ("a", "b", "c")]
    for job, seconds in zip(jobs[:2], recorded.values(), strict=True):
        usage = Usage(gpus=2, gpu_seconds=seconds, running_seconds=seconds / 2, queued_seconds=3.0)
        # What the task wrote beside another annotation the page must not keep.
        job["metadata"]["annotations"] = {USAGE_ANNOTATION: usage.annotation(), "note": SECRET}
    jobs[1]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "gpu-queue"
    state = fake_cluster(monkeypatch, jobs)
    pod_lists: list[str] = []
    monkeypatch.setattr(state.hook, "list_job_pods", lambda name, namespace, kind: pod_lists.append(name) or [])

    answer = client_for(monkeypatch, {"etl"}, ["etl"]).get("/api/jobs")

    assert answer.status_code == 200, answer.text
    # job-c finished without a record (or runs still): no figure, and not counted in a total.
    assert {row["name"]: row["gpu_seconds"] for row in answer.json()["jobs"]} == {
        "job-a": 7200.0,
        "job-b": 1800.5,
        "job-c": None,
    }
    assert answer.json()["totals"] == [
        {"namespace": "ml", "queue": None, "gpu_seconds": 7200.0, "jobs": 1},
        {"namespace": "ml", "queue": "gpu-queue", "gpu_seconds": 1800.5, "jobs": 1},
    ]
    assert pod_lists == []  # one LIST of the jobs per kind: no request per job
    (cached, *_) = state.cache.jobs("ml", "PyTorchJob")
    assert SECRET not in json.dumps(cached)
