"""The UI plugin in the deployment: its API behind Airflow's login, and the tab and page in a real browser;
and the metrics the real triggerer sends while it waits for that job (one job for both: CI's time is short).

One deferred training task (the fan-out DAG with one map index) whose job waits suspended until the
browser test releases it, then runs ``RUN_SECONDS`` on the local cluster (the tab refreshes every 5 s
from a cache of at most 5 s, so it sees the running job at least twice): the tab must show it suspended, then
its Worker active, then succeeded, read from the page as the user sees it. The browser is Debian's
Chromium (``apt-get install chromium``, as .ci/run does) driven by Playwright; the screenshots go to
``.devairflow/screenshots/`` (docs/ui/'s are copied from there).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import pytest
import requests

from tests.e2e.airflow_rest import AirflowRest, wait_until
from tests.e2e.conftest import DEVAIRFLOW_DIR, FANOUT, Cluster, start_fanout
from tests.statsd_listener import StatsdListener

RUN_SECONDS = 20
SCREENSHOTS = DEVAIRFLOW_DIR / "screenshots"
# The kinds the API server lists per namespace (the default [disttrain] ui_kinds).
KINDS = 3
CACHE_SECONDS = 5.0


def ui(airflow: AirflowRest, path: str, **kwargs: Any) -> requests.Response:
    return airflow.session.get(f"{airflow.url}/disttrain{path}", timeout=30, **kwargs)


@pytest.fixture(scope="module")
def statsd() -> Iterator[StatsdListener]:
    """The StatsD server the deployment sends its metrics to (dev/airflow/airflow.cfg.template [metrics])."""
    listener = StatsdListener(int(os.environ.get("DEVAIRFLOW_STATSD_PORT", "28125")), reader=True)
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def held_job(e2e_dags: AirflowRest, cluster: Cluster, statsd: StatsdListener) -> Iterator[tuple[str, str]]:
    """A deferred training task (map index 0 of a fan-out run) whose job waits suspended; ``(run_id, job)``.
    One for the module (CI's time is short): the API test reads it held, the browser test then releases it."""
    runs: list[tuple[str, str]] = []
    run_id = start_fanout(e2e_dags, runs, 1, run_seconds=RUN_SECONDS)
    (job,) = cluster.jobs(FANOUT, run_id)
    yield run_id, job["metadata"]["name"]
    cluster.delete_jobs(FANOUT, run_id)


def test_the_api_shows_a_deferred_tasks_job_to_a_logged_in_user_only(
    airflow: AirflowRest, cluster: Cluster, held_job: tuple[str, str]
) -> None:
    run_id, job_name = held_job
    path = f"/api/task-instance/{FANOUT}/{quote(run_id, safe='')}/train?map_index=0"
    anonymous = requests.get(f"{airflow.url}/disttrain{path}", timeout=30)
    assert anonymous.status_code == 401, anonymous.text
    assert requests.get(f"{airflow.url}/disttrain/api/jobs", timeout=30).status_code == 401

    # A LIST made before the job was created serves for up to one cache period: then the tab says so.
    detail = wait_until(lambda: (answer := ui(airflow, path)).ok and answer.json()["job"], 3 * CACHE_SECONDS, "the job")
    assert (detail["kind"], detail["name"], detail["state"]) == ("PyTorchJob", job_name, "suspended")
    assert detail["replicas"] == [
        {"type": "Worker", "desired": 1, "active": 0, "succeeded": 0, "failed": 0, "gpus_per_replica": 0, "restarts": 0}
    ]
    listed = ui(airflow, "/api/jobs", params={"dag_id": FANOUT}).json()
    (row,) = [row for row in listed["jobs"] if row["name"] == job_name]
    assert row["task_instance"]["run_id"] == run_id and row["task_instance"]["map_index"] == 0
    # Nothing from the connection nor the pod template reaches the UI.
    assert "kubeconfig" not in json.dumps(listed) and "env" not in detail
    assert detail["pods"] == []  # suspended: no pods yet

    # Forty people refreshing at once cost the cluster one LIST per (namespace, kind) per cache period
    # ([disttrain] ui_cache_seconds, 5 s) that their requests span, not one per request.
    before = ui(airflow, "/api/jobs").json()["cluster_lists"]
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: ui(airflow, path).json()["cluster_lists"], range(40)))
    periods = 1 + int((time.monotonic() - started) // CACHE_SECONDS)
    assert max(answers) - before <= KINDS * periods, (before, answers, periods)

    missing = ui(airflow, f"/api/task-instance/{FANOUT}/{quote(run_id, safe='')}/train?map_index=7")
    assert missing.status_code == 404 and "no training job of this task instance" in missing.json()["detail"]


def chromium() -> str:
    path = os.environ.get("DISTTRAIN_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail("Chromium not found: apt-get install -y chromium (or set DISTTRAIN_CHROMIUM)")
    return path


def _admin_password() -> str:
    passwords = DEVAIRFLOW_DIR / "home" / "simple_auth_manager_passwords.json.generated"
    return json.loads(passwords.read_text())["admin"]


def test_the_tab_follows_the_job_in_a_browser_and_the_page_lists_it(
    airflow: AirflowRest, cluster: Cluster, held_job: tuple[str, str]
) -> None:
    from playwright.sync_api import sync_playwright

    run_id, job_name = held_job
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{airflow.url}/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", _admin_password())
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/auth/login" not in url, timeout=60_000)

        page.goto(f"{airflow.url}/dags/{FANOUT}/runs/{quote(run_id, safe='')}/tasks/train/mapped/0")
        page.get_by_role("tab", name="Training job").or_(page.get_by_text("Training job", exact=True)).first.click()
        tab = page.frame_locator("iframe")
        worker = tab.locator('[data-replica="Worker"]')

        def when(state: str, field: str, value: str) -> str:
            """Waits until the tab shows the job in ``state`` with the Worker's ``field`` at ``value``;
            returns the progress line it shows then."""

            def check() -> str | None:
                shown = tab.get_by_test_id("state").first.inner_text(timeout=30_000)
                count = worker.locator(f'[data-field="{field}"]').inner_text()
                return tab.get_by_test_id("progress").inner_text() if (shown, count) == (state, value) else None

            return wait_until(check, 120, f"the tab to show the job {state} with {field} {value}")

        held = when("suspended", "active", "0")
        assert tab.get_by_text(job_name).count() >= 1
        page.screenshot(path=str(SCREENSHOTS / "training-job-tab-suspended.png"))

        assert cluster.release_jobs(FANOUT, run_id) == 1
        running = when("running", "active", "1")
        # The leader's last log lines (or why they cannot be read) and a link to the task's full log.
        tab.get_by_test_id("log").wait_for(timeout=30_000)
        assert tab.get_by_role("link", name="The task's full log").count() == 1
        page.screenshot(path=str(SCREENSHOTS / "training-job-tab.png"))
        succeeded = when("succeeded", "succeeded", "1")
        # The chart draws the job's metrics: those of the task's result (the leader's termination message).
        airflow.wait_for_state(FANOUT, run_id, "train", {"success"}, timeout=120, map_index=0)
        result = airflow.xcom(FANOUT, run_id, "train", map_index=0)
        tab.get_by_test_id("chart").wait_for(timeout=30_000)
        drawn = tab.locator("figure[data-metric] circle").evaluate_all(
            "circles => circles.map(c => [c.closest('figure').dataset.metric, Number(c.dataset.value)])"
        )
        assert result["metrics"] and dict(drawn) == {
            name: value for name, value in result["metrics"].items() if isinstance(value, int | float)
        }
        page.screenshot(path=str(SCREENSHOTS / "training-job-tab-chart.png"))
        # The progress line read from the page changed with the job: suspended, running, succeeded.
        assert held.startswith("suspended") and running.startswith("running") and "Worker: 1 active" in running
        assert succeeded.startswith("succeeded") and "Worker: 1 succeeded" in succeeded

        page.goto(f"{airflow.url}/plugin/training-jobs")
        jobs = page.frame_locator("iframe")
        jobs.get_by_test_id("jobs").wait_for(timeout=60_000)
        page.screenshot(path=str(SCREENSHOTS / "training-jobs-page.png"))
        # Sorted by GPU-hours, descending (two clicks on the header): the README's screenshot of the page.
        header = jobs.locator('th[data-sort="gpu_seconds"]')
        header.click()
        header.click()
        assert header.get_attribute("aria-sort") == "descending"
        page.screenshot(path=str(SCREENSHOTS / "training-jobs-page-sorted.png"))
        # Other tests' jobs may fill more than a page: the filter finds this one.
        jobs.locator("#filter-text").fill(job_name)
        row = jobs.locator(f'[data-job="{job_name}"]')
        row.wait_for(timeout=60_000)
        assert row.get_by_test_id("state").inner_text() == "succeeded"
        link = row.get_by_role("link")
        assert link.get_attribute("href") == f"/dags/{FANOUT}/runs/{quote(run_id, safe='')}/tasks/train/mapped/0"
        # Airflow's dark mode reaches the framed page (its colour mode is the class of Airflow's <html>).
        page.evaluate(
            "document.documentElement.classList.remove('light'); document.documentElement.classList.add('dark')"
        )
        wait_until(
            lambda: jobs.locator("html").get_attribute("data-theme") == "dark",
            10,
            "the page to follow Airflow's dark mode",
        )
        page.screenshot(path=str(SCREENSHOTS / "training-jobs-page-dark.png"))
        link.click()  # opens the task instance in the whole window, not in the page's frame
        page.wait_for_url(lambda url: "/tasks/train/mapped/0" in url, timeout=30_000)
        browser.close()


def test_the_triggerer_sends_the_jobs_state_to_statsd_while_it_waits(
    statsd: StatsdListener, held_job: tuple[str, str]
) -> None:
    """After the browser test, the job has been suspended, running and has succeeded: the real triggerer
    said so through Airflow's StatsD logger (Airflow's own metrics arrive on the same port)."""
    assert any(line.startswith("airflow.") and not line.startswith("airflow.disttrain.") for line in statsd.drain(1.0))
    sent = statsd.ours()
    for gauge in ("disttrain.jobs.suspended:1|g", "disttrain.jobs.running:1|g", "disttrain.triggers.waiting:0|g"):
        assert gauge in sent, sent
    # In that order: held, released, ended (the trigger forgot the job once it finished).
    assert sent.index("disttrain.jobs.suspended:1|g") < sent.index("disttrain.jobs.running:1|g")
    assert sent.index("disttrain.jobs.running:1|g") < len(sent) - 1 - sent[::-1].index("disttrain.triggers.waiting:0|g")
