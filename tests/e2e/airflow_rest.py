"""A small client of Airflow's public REST API (``/api/v2``, Bearer token), as a CI system would use it.

The end-to-end tests drive the deployment through this only: trigger runs, read task instances and
their tries, mark them failed, clear them. Everything else they check is on the cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import requests

TERMINAL_RUN_STATES = {"success", "failed"}


class AirflowRest:
    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/")
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, f"{self.url}/api/v2{path}", timeout=30, **kwargs)
        if not response.ok:
            raise AssertionError(f"{method} {path} -> {response.status_code}: {response.text[:2000]}")
        return response.json() if response.content else None

    # -- DAGs and runs -------------------------------------------------------------------------------

    def dag_exists(self, dag_id: str) -> bool:
        response = self.session.get(f"{self.url}/api/v2/dags/{dag_id}", timeout=30)
        return response.status_code == 200

    def unpause(self, dag_id: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None, logical_date: str | None = None) -> str:
        body = {"logical_date": logical_date, "conf": conf or {}}
        run = self.call("POST", f"/dags/{dag_id}/dagRuns", json=body)
        return run["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float) -> str:
        """Waits until the run finishes; returns its state."""
        state = wait_until(
            lambda: (s := self.run_state(dag_id, run_id)) in TERMINAL_RUN_STATES and s,
            timeout,
            f"DAG run {dag_id}/{run_id} to finish",
        )
        return str(state)

    # -- task instances ------------------------------------------------------------------------------

    def task_instances(self, dag_id: str, run_id: str, task_id: str | None = None) -> list[dict[str, Any]]:
        """Every task instance of the run (or every map index of ``task_id``), across pages."""
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances"
        if task_id is not None:
            path += f"/{task_id}/listMapped"
        found: list[dict[str, Any]] = []
        while True:
            page = self.call("GET", path, params={"limit": 100, "offset": len(found)})
            found.extend(page["task_instances"])
            if not page["task_instances"] or len(found) >= page["total_entries"]:
                return found

    def task_instance(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any]:
        return self.call("GET", ti_path(dag_id, run_id, task_id, map_index))

    def tries(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[dict[str, Any]]:
        return self.call("GET", f"{ti_path(dag_id, run_id, task_id, map_index)}/tries")["task_instances"]

    def wait_for_state(
        self, dag_id: str, run_id: str, task_id: str, states: set[str], timeout: float, map_index: int = -1
    ) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            ti = self.task_instance(dag_id, run_id, task_id, map_index)
            return ti if ti["state"] in states else None

        return wait_until(reached, timeout, f"{dag_id}/{run_id}/{task_id}[{map_index}] to be {sorted(states)}")

    def mark(self, dag_id: str, run_id: str, task_id: str, state: str, map_index: int = -1) -> None:
        self.call("PATCH", ti_path(dag_id, run_id, task_id, map_index), json={"new_state": state})

    def clear(self, dag_id: str, run_id: str, task_id: str) -> None:
        self.call(
            "POST",
            f"/dags/{dag_id}/clearTaskInstances",
            json={"dry_run": False, "dag_run_id": run_id, "task_ids": [task_id], "only_failed": False},
        )

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.call("GET", path, params={"map_index": map_index, "deserialize": True})["value"]

    def log_lines(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> list[Any]:
        """A try's log as the API gives it: structured lines (``timestamp``, ``event``, ...) or text."""
        body = self.call(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"map_index": map_index, "full_content": True},
            headers={"Accept": "application/json"},
        )
        return list(body.get("content") or [])

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        content = self.log_lines(dag_id, run_id, task_id, try_number, map_index)
        return "\n".join(str(line.get("event", line)) if isinstance(line, dict) else str(line) for line in content)


def ti_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"
    return path if map_index < 0 else f"{path}/{map_index}"


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
    """Polls ``check`` until it returns something truthy, which is returned; fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
