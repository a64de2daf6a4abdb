"""The two pages in a real browser, without Airflow: Chromium (Debian's, as .ci/run installs it) driven by
Playwright loads the static pages, whose requests Playwright answers with fixture JSON. The chart's
points are the fixture's metrics, the jobs table sorts, filters and pages, and both themes apply:
the system's preference, and Airflow's own colour mode (the class of its window's <html>) when framed."""

from __future__ import annotations

import json
import mimetypes
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

playwright_api = pytest.importorskip(
    "playwright.sync_api",
    reason="the [browser-test] extra drives Chromium: in .venv (make unit-test runs these), not in .venv-lowest",
)

STATIC = Path(__file__).resolve().parents[3] / "airflow_provider_disttrain" / "ui" / "static"
ORIGIN = "http://disttrain.test"
TAB = f"{ORIGIN}/disttrain/task-instance/etl/r1/train/-1"
JOBS = f"{ORIGIN}/disttrain/jobs"
LIGHT, DARK = "rgb(255, 255, 255)", "rgb(26, 32, 44)"

POINTS = [
    {"t": 1_700_000_000.0, "values": {"loss": 0.91, "eval_accuracy": 0.52}},
    {"t": 1_700_000_030.0, "values": {"loss": 0.63, "eval_accuracy": 0.71}},
    {"t": 1_700_000_090.0, "values": {"loss": 0.41}},
]
JOB = {
    "kind": "TrainJob",
    "namespace": "ml",
    "name": "bert",
    "state": "succeeded",  # finished: the tab stops asking after a few reads
    "queue": "gpu",
    "gpus_held": 0,
    "queued_seconds": 12,
    "running_seconds": 90,
    "progress": "succeeded",
    "waiting": None,
    "failure": None,
    "timeline": [],
    "conditions": [],
    "log": None,
    "replicas": [],
    "pods": [],
    "events": [],
    "usage": {"gpus": 8, "gpu_seconds": 720.0, "running_seconds": 90.0, "queued_seconds": 12.0},
    "chart": {"points": POINTS, "source": "the trainer's reports (trainerStatus)"},
}


def job_row(index: int) -> dict[str, Any]:
    return {
        "kind": "PyTorchJob",
        "namespace": "ml" if index % 2 else "research",
        "name": f"job-{index:02d}",
        "state": "queued" if index % 3 == 0 else "succeeded",
        "queue": "gpu",
        "gpus_held": 0,
        "gpu_seconds": float(index * 360),
        "queued_seconds": 5,
        "running_seconds": 60,
        "wait": {"position": index, "estimate_seconds": 60.0 * index, "explanation": "e"} if index % 3 == 0 else None,
        "task_instance": {"dag_id": f"dag-{index % 4}", "task_id": "train", "map_index": -1, "run_id": None},
    }


PAGE = {
    "jobs": [job_row(i) for i in range(30)],
    "namespaces": ["ml", "research"],
    "gpus_per_namespace": {"ml": 0},
    "gpus_per_queue": {},
    "totals": [{"namespace": "ml", "queue": "gpu", "gpu_seconds": 81000.0, "jobs": 15}],
}
# Airflow's window framing the page, its colour mode the class of its <html> (next-themes).
HOST = '<html class="{mode}"><body><iframe src="/disttrain/jobs" width="1200" height="800"></iframe></body></html>'


def chromium() -> str:
    path = os.environ.get("DISTTRAIN_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail("Chromium not found: apt-get install -y chromium (or set DISTTRAIN_CHROMIUM)")
    return path


def answer(route: Any) -> None:
    """The plugin's routes as Airflow's API server serves them: the pages, their static files, fixture JSON."""
    path = route.request.url.removeprefix(ORIGIN).split("?")[0]
    if path.startswith("/disttrain/api/task-instance/"):
        return route.fulfill(json={"job": JOB})
    if path == "/disttrain/api/jobs":
        return route.fulfill(json=PAGE)
    if path.startswith("/disttrain/static/"):
        file = STATIC / path.removeprefix("/disttrain/static/")
        return route.fulfill(body=file.read_bytes(), content_type=mimetypes.guess_type(file.name)[0] or "text/plain")
    if path.startswith("/disttrain/task-instance/"):
        return route.fulfill(body=(STATIC / "task_instance.html").read_text(), content_type="text/html")
    if path == "/disttrain/jobs":
        return route.fulfill(body=(STATIC / "jobs.html").read_text(), content_type="text/html")
    if path.startswith("/host-"):
        return route.fulfill(body=HOST.format(mode=path.removeprefix("/host-")), content_type="text/html")
    return route.fulfill(status=404, body="")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium(), args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()


def open_page(browser: Any, url: str, scheme: str = "light") -> Any:
    page = browser.new_page(color_scheme=scheme, viewport={"width": 1280, "height": 900})
    page.route(f"{ORIGIN}/**", answer)
    page.goto(url)
    return page


def test_the_tabs_chart_draws_the_fixtures_metrics(browser: Any) -> None:
    page = open_page(browser, TAB)
    page.get_by_test_id("chart").wait_for()
    assert page.get_by_test_id("gpu-hours").inner_text() == "0.20"
    drawn = page.eval_on_selector_all(
        "figure[data-metric] circle",
        """circles => circles.map(c => [c.closest("figure").dataset.metric, Number(c.dataset.t),
            Number(c.dataset.value), c.getBoundingClientRect().x, c.getBoundingClientRect().y])""",
    )
    assert {(m, t, v) for m, t, v, _, _ in drawn} == {(m, p["t"], v) for p in POINTS for m, v in p["values"].items()}
    for metric in ("loss", "eval_accuracy"):
        points = sorted((t, v, x, y) for m, t, v, x, y in drawn if m == metric)
        # On screen: later is further right; a higher value is higher up (a smaller y).
        assert [x for _, _, x, _ in points] == sorted(x for _, _, x, _ in points)
        by_value = sorted(points, key=lambda p: p[1])
        assert [y for _, _, _, y in by_value] == sorted((y for _, _, _, y in by_value), reverse=True)
    page.close()


def shown_names(page: Any) -> list[str]:
    return page.eval_on_selector_all("tr[data-job]", "rows => rows.map(r => r.dataset.job)")


def test_the_jobs_page_sorts_filters_and_pages(browser: Any) -> None:
    page = open_page(browser, JOBS)
    page.get_by_test_id("jobs").wait_for()
    assert page.get_by_test_id("page").inner_text() == "page 1 of 2 (30 jobs)"
    assert len(shown_names(page)) == 25
    page.get_by_role("button", name="Next").click()
    # By namespace (ml: the odd ones, then research), the listing's order among them: research's last five.
    assert shown_names(page) == [f"job-{i:02d}" for i in (20, 22, 24, 26, 28)]

    page.locator('th[data-sort="gpu_seconds"]').click()  # ascending, back on the first page's rows
    page.select_option("#page-size", "10")
    assert shown_names(page) == [f"job-{i:02d}" for i in range(10)]
    page.locator('th[data-sort="gpu_seconds"]').click()  # descending
    assert shown_names(page)[:3] == ["job-29", "job-28", "job-27"]
    assert page.locator('th[data-sort="gpu_seconds"]').get_attribute("aria-sort") == "descending"
    assert page.locator('[data-job="job-29"] [data-field="gpu_seconds"]').inner_text() == "2.90"

    page.fill("#filter-text", "DAG-1 research")  # no row: odd rows are ml, dag-1 rows are odd
    assert shown_names(page) == []
    page.fill("#filter-text", "dag-3")
    page.select_option("#filter-state", "queued")
    assert shown_names(page) == ["job-27", "job-15", "job-03"]
    assert "position 27" in page.locator('[data-job="job-27"] [data-field="wait"]').inner_text()
    assert page.get_by_test_id("totals").locator('[data-field="gpu-hours"]').inner_text() == "22.50"
    page.close()


def background(frame: Any) -> str:
    return frame.evaluate("getComputedStyle(document.body).backgroundColor")


@pytest.mark.parametrize(("scheme", "expected"), [("light", LIGHT), ("dark", DARK)])
def test_a_page_alone_follows_the_systems_colour_scheme(browser: Any, scheme: str, expected: str) -> None:
    page = open_page(browser, JOBS, scheme)
    page.get_by_test_id("jobs").wait_for()
    assert background(page) == expected
    page.close()


def test_a_framed_page_follows_airflows_colour_mode_and_its_changes(browser: Any) -> None:
    page = open_page(browser, f"{ORIGIN}/host-dark", "light")  # Airflow dark on a light system
    frame = page.frame_locator("iframe")
    frame.get_by_test_id("jobs").wait_for()
    (framed,) = [f for f in page.frames if f.url == JOBS]
    assert background(framed) == DARK
    page.evaluate("document.documentElement.className = 'light'")  # the user switches Airflow to light
    framed.wait_for_function(f"getComputedStyle(document.body).backgroundColor === {json.dumps(LIGHT)}")
    page.close()
