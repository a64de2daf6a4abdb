"""End-to-end fixtures: the local Airflow deployment (make airflow-up) driven through its REST API only,
and the local cluster (make cluster-up) read with admin credentials to check what the tasks did there.

The tests never drive Airflow from Python nor touch its database: they trigger, mark and clear through
``/api/v2`` with the token of ``.devairflow/env``, and inject faults into the deployment's processes
(whose pids the supervisors keep in ``.devairflow/pids/``) the way an operator or a crash would.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_provider_disttrain.ownership.naming import (
    DAG_ID_LABEL,
    RUN_ID_LABEL,
    TASK_INSTANCE_LABEL,
    label_selector,
    sanitize_label_value,
)
from tests.e2e.airflow_rest import AirflowRest, wait_until

REPO = Path(__file__).resolve().parents[2]
DEVAIRFLOW_DIR = Path(os.environ.get("DEVAIRFLOW_DIR", REPO / ".devairflow"))
DEVCLUSTER_DIR = Path(os.environ.get("DEVCLUSTER_DIR", REPO / ".devcluster"))
NAMESPACE = os.environ.get("DEVAIRFLOW_NAMESPACE", "disttrain-airflow")
E2E_DAGS = Path(__file__).parent / "dags"
# Two DAG ids of 74 characters sharing their first 63 (tests/e2e/dags/disttrain_e2e.py): one DAG-id label.
COLLIDING_PREFIX = "disttrain_e2e_colliding_ids_whose_first_63_characters_are_equal"
COLLIDING_DAG_IDS = (f"{COLLIDING_PREFIX}_for_team_a", f"{COLLIDING_PREFIX}_for_team_b")
E2E_DAG_IDS = (
    "disttrain_e2e_fanout",
    "disttrain_e2e_long",
    "disttrain_e2e_sync",
    "disttrain_e2e_orphan",
    "disttrain_e2e_asset_train",
    "disttrain_e2e_lineage_failure",
    "disttrain_e2e_queues",
    *COLLIDING_DAG_IDS,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.e2e)


def read_env_file(path: Path) -> dict[str, str]:
    """``export KEY=value`` lines of .devairflow/env."""
    values = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.removeprefix("export ").partition("=")
        if sep and not line.startswith("#"):
            values[key.strip()] = value.strip()
    return values


def connect_airflow() -> AirflowRest:
    """The deployment's REST API; fails (never skips) when it is not up."""
    env_file = DEVAIRFLOW_DIR / "env"
    if not env_file.is_file():
        pytest.fail(f"{env_file} not found: start Airflow with `make airflow-up`")
    env = read_env_file(env_file)
    api = AirflowRest(env["AIRFLOW_API_URL"], env["AIRFLOW_API_TOKEN"])
    health = api.call("GET", "/monitor/health")
    unhealthy = {part: body for part, body in health.items() if body.get("status") != "healthy"}
    if unhealthy:
        pytest.fail(f"Airflow is not healthy: {unhealthy} (make airflow-status)")
    return api


@pytest.fixture(scope="session")
def airflow() -> AirflowRest:
    return connect_airflow()


def install_e2e_dags(airflow: AirflowRest) -> AirflowRest:
    """The test DAGs, copied into the deployment's DAGs folder, parsed by its dag-processor and unpaused."""
    copied_at = datetime.now(timezone.utc)
    changed = False
    for source in E2E_DAGS.glob("*.py"):
        target = DEVAIRFLOW_DIR / "dags" / source.name
        if not target.exists() or target.read_bytes() != source.read_bytes():
            shutil.copyfile(source, target)
            changed = True

    def parsed(dag_id: str) -> bool:
        response = airflow.session.get(f"{airflow.url}/api/v2/dags/{dag_id}", timeout=30)
        if response.status_code != 200:
            return False
        # A changed file must be parsed again, or runs would use the DAG's previous version.
        return not changed or datetime.fromisoformat(response.json()["last_parsed_time"]) > copied_at

    for dag_id in E2E_DAG_IDS:
        wait_until(lambda dag_id=dag_id: parsed(dag_id), 180, f"the dag-processor to parse {dag_id}")
        airflow.unpause(dag_id)
    return airflow


@pytest.fixture(scope="session")
def e2e_dags(airflow: AirflowRest) -> AirflowRest:
    return install_e2e_dags(airflow)


class Cluster:
    """Admin-side reads of the training jobs the deployment's tasks created."""

    def __init__(self) -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=str(DEVCLUSTER_DIR / "kubeconfig"), client_configuration=configuration)
        self.custom = client.CustomObjectsApi(client.ApiClient(configuration))

    def jobs(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The PyTorchJobs of one DAG run, selected by the labels the operator puts on every job."""
        selector = label_selector(
            {DAG_ID_LABEL: sanitize_label_value(dag_id), RUN_ID_LABEL: sanitize_label_value(run_id)}
        )
        return self.custom.list_namespaced_custom_object(
            "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", label_selector=selector
        )["items"]

    def jobs_per_task_instance(self, dag_id: str, run_id: str) -> dict[str, list[dict[str, Any]]]:
        grouped: dict[str, list[dict[str, Any]]] = {}
        for job in self.jobs(dag_id, run_id):
            grouped.setdefault(job["metadata"]["labels"][TASK_INSTANCE_LABEL], []).append(job)
        return grouped

    def release_jobs(self, dag_id: str, run_id: str) -> int:
        """Unsuspends the run's jobs, as a queueing system admits them; returns how many."""
        jobs = self.jobs(dag_id, run_id)
        for job in jobs:
            self.custom.patch_namespaced_custom_object(
                "kubeflow.org",
                "v1",
                NAMESPACE,
                "pytorchjobs",
                job["metadata"]["name"],
                {"spec": {"runPolicy": {"suspend": False}}},
            )
        return len(jobs)

    def delete_jobs(self, dag_id: str, run_id: str) -> None:
        for job in self.jobs(dag_id, run_id):
            self.custom.delete_namespaced_custom_object(
                "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", job["metadata"]["name"]
            )


class JobEvents:
    """Every watch event of one DAG's PyTorchJobs from the moment it is created, recorded by a thread:
    a duplicate job created and deleted again between two looks at the cluster still shows up as a
    second ADDED event (and a DELETED one)."""

    def __init__(self, cluster: Cluster, dag_id: str) -> None:
        self.custom = cluster.custom
        self.selector = label_selector({DAG_ID_LABEL: sanitize_label_value(dag_id)})
        listing = self.custom.list_namespaced_custom_object(
            "kubeflow.org", "v1", NAMESPACE, "pytorchjobs", label_selector=self.selector
        )
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.events: list[tuple[str, dict[str, str]]] = []  # (type, labels)
        self.error: BaseException | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._record, daemon=True, name="job-events")
        self._thread.start()

    def _record(self) -> None:
        from kubernetes import watch

        try:
            while not self._stopped.is_set():  # each watch ends after timeout_seconds; the next resumes
                stream = watch.Watch().stream(
                    self.custom.list_namespaced_custom_object,
                    "kubeflow.org",
                    "v1",
                    NAMESPACE,
                    "pytorchjobs",
                    label_selector=self.selector,
                    resource_version=self.resource_version,
                    timeout_seconds=5,
                )
                for event in stream:
                    job = event["object"]
                    self.resource_version = job["metadata"]["resourceVersion"]
                    self.events.append((event["type"], job["metadata"].get("labels") or {}))
        except BaseException as error:  # a 410 would mean missed events: the test must not pass then
            self.error = error

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=30)
        if self.error is not None:
            raise AssertionError(f"the watch of the jobs' events failed: {self.error!r}")

    def of_run(self, event_type: str, run_id: str) -> list[dict[str, str]]:
        """Labels of the jobs of one run that had an event of ``event_type``."""
        run = sanitize_label_value(run_id)
        return [labels for kind, labels in self.events if kind == event_type and labels.get(RUN_ID_LABEL) == run]


def job_succeeded(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)


def assert_one_succeeded_job_per_task_instance(
    airflow: AirflowRest, cluster: Cluster, dag_id: str, run_id: str, count: int
) -> None:
    tis = airflow.task_instances(dag_id, run_id, "train")
    assert len(tis) == count and {ti["state"] for ti in tis} == {"success"}
    per_task_instance = cluster.jobs_per_task_instance(dag_id, run_id)
    assert len(per_task_instance) == count
    for key, jobs in per_task_instance.items():
        assert len(jobs) == 1, f"task instance {key} has {len(jobs)} jobs"
        assert job_succeeded(jobs[0]), f"{jobs[0]['metadata']['name']} is not Succeeded: {jobs[0].get('status')}"


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    if not (DEVCLUSTER_DIR / "kubeconfig").is_file():
        pytest.fail("the local cluster is not up: run `make cluster-up`")
    cluster = Cluster()
    try:
        client.CoreV1Api(cluster.custom.api_client).read_namespace(NAMESPACE)
    except ApiException as error:
        # A cluster started afresh (etcd is wiped) lost the namespace and the service account token.
        pytest.fail(f"namespace {NAMESPACE} is missing ({error.status}): run `make airflow-up` again")
    return cluster


@pytest.fixture
def runs(e2e_dags: AirflowRest, cluster: Cluster) -> Iterator[list[tuple[str, str]]]:
    """Runs a test triggers (append ``(dag_id, run_id)``); their jobs are deleted afterwards."""
    started: list[tuple[str, str]] = []
    yield started
    for dag_id, run_id in started:
        cluster.delete_jobs(dag_id, run_id)


class Process:
    """One supervised process of the deployment (its pid file is rewritten on every restart)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid_file = DEVAIRFLOW_DIR / "pids" / f"{name}.pid"
        self.log_file = DEVAIRFLOW_DIR / "logs" / f"{name}.log"

    @property
    def pid(self) -> int:
        return int(self.pid_file.read_text())

    def rss_mb(self) -> dict[str, float]:
        """Resident memory (MB) of the process and of each child, by role: a triggerer runs its
        triggers in a forked child ("trigger runner"), the first one also a log server."""
        process = psutil.Process(self.pid)
        memory = {self.name: process.memory_info().rss / 2**20}
        for child in process.children(recursive=True):
            if "airflow serve-logs" in " ".join(child.cmdline()):  # its title (setproctitle)
                role = "log server"
            elif self.name.startswith("triggerer") and child.cmdline() == process.cmdline():
                role = "trigger runner"  # the forked child whose event loop runs the triggers
            else:
                role = f"{self.name} child {child.pid}"
            memory[role] = child.memory_info().rss / 2**20
        return memory

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.pid).children(recursive=True)

    def kill_hard(self) -> int:
        """SIGKILL to the whole process group, as a crash of its container; returns the killed pid."""
        pid = self.pid
        os.killpg(pid, signal.SIGKILL)
        return pid

    def lose(self) -> int:
        """SIGKILL to the supervisor, then to the process group, as when its node is lost: nothing
        restarts it (``make airflow-up`` does). Returns the killed pid."""
        os.kill(int((self.pid_file.parent / f"{self.name}.supervisor.pid").read_text()), signal.SIGKILL)
        return self.kill_hard()

    def restart(self) -> int:
        """SIGTERM (a graceful stop, as a rolling restart sends); the supervisor starts it again."""
        pid = self.pid
        os.kill(pid, signal.SIGTERM)
        return pid

    def wait_restarted(self, old_pid: int, timeout: float = 60) -> int:
        def new_pid() -> int | None:
            try:
                pid = self.pid
            except (FileNotFoundError, ValueError):
                return None
            return pid if pid != old_pid and psutil.pid_exists(pid) else None

        return wait_until(new_pid, timeout, f"the supervisor to restart {self.name}")


@pytest.fixture(scope="session")
def scheduler() -> Process:
    return Process("scheduler")


def wait_for_health(airflow: AirflowRest, part: str, timeout: float = 120) -> None:
    """Waits until the API server reports ``part`` (e.g. ``triggerer``) healthy."""

    def healthy() -> bool:
        return airflow.call("GET", "/monitor/health")[part]["status"] == "healthy"

    wait_until(healthy, timeout, f"{part} to report healthy")


def deferred_count(airflow: AirflowRest, dag_id: str, run_id: str, task_id: str = "train") -> int:
    """How many map indexes of ``task_id`` are deferred with their trigger held by a triggerer."""
    tis = airflow.task_instances(dag_id, run_id, task_id)
    return sum(ti["state"] == "deferred" and ti["triggerer_job"] is not None for ti in tis)


FANOUT = "disttrain_e2e_fanout"


def start_fanout(
    airflow: AirflowRest,
    runs: list[tuple[str, str]],
    count: int,
    run_seconds: float | None = None,
    timeout: float = 240,
) -> str:
    """Triggers ``count`` training tasks (whose pods run ``run_seconds`` once released, 5 by default);
    returns once all are deferred, their (suspended) jobs held."""
    conf: dict[str, Any] = {"count": count}
    if run_seconds is not None:
        conf["run_seconds"] = run_seconds
    run_id = airflow.trigger(FANOUT, conf)
    runs.append((FANOUT, run_id))
    wait_until(lambda: deferred_count(airflow, FANOUT, run_id) == count, timeout, f"{count} deferred tasks")
    return run_id


def task_process(ti: dict[str, Any]) -> psutil.Process:
    """The process running a task instance: the task runner retitles itself "airflow worker -- <ti id>"."""
    title = f"airflow worker -- {ti['id']}"

    def find() -> psutil.Process | None:
        for process in psutil.process_iter(["cmdline"]):
            if title in " ".join(process.info["cmdline"] or []):
                return process
        return None

    return wait_until(find, 30, f"the process titled {title!r}")


def since(start: float) -> float:
    return round(time.monotonic() - start, 1)
