"""End-to-end fixtures: the local Airflow deployment (make airflow-up) driven through its REST API only,
and the local cluster (make cluster-up) read with admin credentials to check what the tasks did there.

The tests never import Airflow nor touch its database: they trigger, mark and clear through
``/api/v2`` with the token of ``.devairflow/env``, and inject faults into the deployment's processes
(whose pids the supervisors keep in ``.devairflow/pids/``) the way an operator or a crash would.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_provider_disttrain.naming import (
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
E2E_DAG_IDS = ("disttrain_e2e_fanout", "disttrain_e2e_long", "disttrain_e2e_sync", "disttrain_e2e_orphan")


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


@pytest.fixture(scope="session")
def airflow() -> AirflowRest:
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
def e2e_dags(airflow: AirflowRest) -> AirflowRest:
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


def job_succeeded(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)


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
        """Resident memory (MB) of the process and of each child, by role: the triggerer runs its
        triggers in a child process ("trigger runner") next to its log server."""
        process = psutil.Process(self.pid)
        memory = {self.name: process.memory_info().rss / 2**20}
        for child in process.children(recursive=True):
            command = " ".join(child.cmdline())
            role = "log server" if "serve-logs" in command else f"{self.name} child {child.pid}"
            if self.name == "triggerer" and command.endswith("airflow triggerer"):
                role = "trigger runner"  # the forked child whose event loop runs the triggers
            memory[role] = child.memory_info().rss / 2**20
        return memory

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.pid).children(recursive=True)

    def kill_hard(self) -> int:
        """SIGKILL to the whole process group, as a crash of its container; returns the killed pid."""
        pid = self.pid
        os.killpg(pid, signal.SIGKILL)
        return pid

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
def triggerer() -> Process:
    return Process("triggerer")


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
