"""The jobs page and the Training job tab tell the iterations of an Airflow 3.4 Task Loop apart.

Airflow 3.4 names a looped task instance by ``region_id``/``region_index`` (its ``map_index`` column is the
region index, the iteration) and its UI carries them in the task instance's URL, which the tab forwards.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fastapi.testclient import TestClient

from airflow_provider_disttrain.ownership.naming import LoopRegion, task_instance_labels
from airflow_provider_disttrain.ui import app as ui_app
from airflow_provider_disttrain.ui import view
from tests.unit.ui.test_app import client_for, fake_cluster, running_job, settings  # noqa: F401

REGION = "0190f3a2-7c1e-7d4b-9a55-3b6f2d8e1c40"
RUN = "manual__2026-12-05T10:00:00+00:00"


def iteration_job(iteration: int) -> dict[str, Any]:
    job = running_job(f"train-{iteration}", "retrain")
    job["metadata"]["labels"] = task_instance_labels(
        "retrain", "train", RUN, -1, 1, loop=LoopRegion(REGION, iteration, iteration)
    )
    job["metadata"]["creationTimestamp"] = f"2026-12-05T10:0{iteration}:00Z"
    return job


def test_the_jobs_page_links_each_iterations_job_to_its_own_task_instance_row() -> None:
    rows = [view.job_summary(iteration_job(i), now=0) for i in range(2)]
    # Airflow 3.4's rows: (dag, task, run, map_index = region index = iteration, region_id).
    tis = [("retrain", "train", RUN, 0, REGION), ("other", "train", RUN, 1, REGION)]

    linked = {row["name"]: row["task_instance"] for row in view.link_task_instances(rows, tis)}

    assert linked["train-0"]["run_id"] == RUN and linked["train-0"]["loop_iteration"] == 0
    assert linked["train-0"]["region_id"] == REGION
    assert linked["train-1"]["run_id"] is None  # iteration 1 of this task has no row: no link to iteration 0's


def test_the_tab_shows_the_iterations_own_job_not_the_newest(settings: None, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    jobs = [iteration_job(0), iteration_job(1)]
    fake_cluster(monkeypatch, jobs)
    monkeypatch.setattr(ui_app.cluster().hook, "get_job", lambda kind, name, namespace: copy.deepcopy(jobs[0]))
    monkeypatch.setattr(ui_app, "requires_access_dag", lambda **_kwargs: lambda: None)  # access: test_app's
    monkeypatch.setattr(ui_app, "_job_namespace", lambda *_args: None)  # no XCom: the UI's namespaces
    client: TestClient = client_for(monkeypatch, {"retrain"}, ["retrain"])
    url = f"/api/task-instance/retrain/{RUN}/train"

    first = client.get(url, params={"region_id": REGION, "region_index": 0})
    newest_without_region = client.get(url)

    assert first.status_code == 200 and first.json()["job"]["name"] == "train-0"
    assert client.get(url, params={"region_id": REGION, "region_index": 1}).json()["job"]["name"] == "train-1"
    assert client.get(url, params={"region_id": REGION, "region_index": 2}).status_code == 404
    assert newest_without_region.status_code == 404  # no plain task instance of that run has a job
