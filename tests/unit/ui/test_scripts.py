"""The pages' own functions, run in node: the chart's mapping of metrics to points, the jobs table's sorting,
filtering and paging; and the two pages drawing the contract's fields (usage, wait, totals, chart)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.ui.test_pages import run

NODE = shutil.which("node")
FUNCTIONS = Path(__file__).with_name("functions.js")
pytestmark = pytest.mark.skipif(NODE is None, reason="node runs the pages' scripts")


def call(scripts: list[str], name: str, *args: Any) -> Any:
    """``name(*args)`` as the page that loads ``scripts`` (in that order) runs it."""
    result = subprocess.run(
        [str(NODE), str(FUNCTIONS), *scripts, name, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout)


CHART = ["common.js", "chart.js"]
TABLE = ["common.js", "table.js"]
POINTS = [
    {"t": 1000.0, "values": {"loss": 0.9, "eval_accuracy": 0.5}},
    {"t": 1060.0, "values": {"loss": 0.4}},
    {"t": 1030.0, "values": {"loss": 0.6, "eval_accuracy": 0.7, "note": "x"}},
]


def test_each_metric_is_a_series_of_its_numbers_in_time_order():
    assert call(CHART, "chartSeries", POINTS) == [
        {"name": "loss", "points": [[1000.0, 0.9], [1030.0, 0.6], [1060.0, 0.4]]},
        {"name": "eval_accuracy", "points": [[1000.0, 0.5], [1030.0, 0.7]]},
    ]


def test_the_chart_puts_the_first_time_left_the_last_right_the_highest_value_on_top():
    layout = call(CHART, "chartLayout", [[1000, 0.9], [1030, 0.6], [1060, 0.4]], 1000, 1060)
    (left, top), (middle_x, _), (right, bottom) = layout["xy"]
    assert left < middle_x < right and top < bottom
    assert middle_x == pytest.approx((left + right) / 2)
    # The shared time axis: a series that ends earlier ends left of the right edge.
    shorter = call(CHART, "chartLayout", [[1000, 0.5], [1030, 0.7]], 1000, 1060)
    assert shorter["xy"][1][0] == pytest.approx(middle_x)


def test_every_point_the_chart_draws_is_a_point_of_the_api():
    html = call(CHART, "renderChart", {"points": POINTS, "source": "the trainer's reports"})
    drawn = {
        (metric, float(t), float(value))
        for metric, figure in re.findall(r'data-metric="([^"]+)"(.*?)</figure>', html, re.S)
        for t, value in re.findall(r'data-t="([^"]+)" data-value="([^"]+)"', figure)
    }
    expected = {(name, p["t"], v) for p in POINTS for name, v in p["values"].items() if isinstance(v, float)}
    assert drawn == expected
    assert call(CHART, "renderChart", {"points": [], "source": ""}) == ""
    assert "<img" not in call(CHART, "renderChart", {"points": [{"t": 1, "values": {"<img>": 1}}], "source": "<img>"})


def row(name: str, namespace: str, state: str, gpu_seconds: float | None, dag: str = "etl", **extra: Any) -> dict:
    return {
        "name": name,
        "namespace": namespace,
        "state": state,
        "gpu_seconds": gpu_seconds,
        "task_instance": {"dag_id": dag, "task_id": "train", "map_index": -1},
        **extra,
    }


ROWS = [
    row("a", "ml", "running", 7200.0),
    row("b", "ml", "succeeded", None),
    row("c", "research", "queued", 0.0, dag="nightly", wait={"position": 2, "estimate_seconds": 300.0}),
    row("d", "research", "succeeded", 36.0),
    row("e", "ml", "queued", 3600.0, wait={"position": 1, "estimate_seconds": None}),
]


def names(rows: list[dict]) -> list[str]:
    return [r["name"] for r in rows]


def test_sorting_by_a_number_puts_rows_without_one_last_either_way():
    assert names(call(TABLE, "sortRows", ROWS, "gpu_seconds", False)) == ["c", "d", "e", "a", "b"]
    assert names(call(TABLE, "sortRows", ROWS, "gpu_seconds", True)) == ["a", "e", "d", "c", "b"]
    assert names(call(TABLE, "sortRows", ROWS, "wait", False)) == ["c", "a", "b", "d", "e"]


def test_sorting_by_text_keeps_the_listings_order_among_ties():
    assert names(call(TABLE, "sortRows", ROWS, "namespace", False)) == ["a", "b", "e", "c", "d"]
    assert names(call(TABLE, "sortRows", ROWS, "task", True)) == ["c", "a", "b", "d", "e"]


def test_the_filter_matches_every_word_over_dag_task_job_and_namespace_and_the_state():
    assert names(call(TABLE, "filterRows", ROWS, "RESEARCH", "")) == ["c", "d"]
    assert names(call(TABLE, "filterRows", ROWS, "nightly train", "")) == ["c"]
    assert names(call(TABLE, "filterRows", ROWS, "ml", "queued")) == ["e"]
    assert names(call(TABLE, "filterRows", ROWS, "", "succeeded")) == ["b", "d"]
    assert call(TABLE, "filterRows", ROWS, "nowhere", "") == []


def test_paging_cuts_the_rows_and_clamps_the_page():
    second = call(TABLE, "pageOf", ROWS, 1, 2)
    assert (names(second["rows"]), second["page"], second["pages"], second["total"]) == (["c", "d"], 1, 3, 5)
    assert names(call(TABLE, "pageOf", ROWS, 9, 2)["rows"]) == ["e"]  # past the end: the last page
    assert call(TABLE, "pageOf", [], 0, 25) == {"rows": [], "page": 0, "pages": 1, "total": 0}


def test_the_jobs_page_shows_gpu_hours_the_totals_and_the_wait():
    answer = {
        "jobs": [{**r, "kind": "PyTorchJob", "queue": "q", "gpus_held": 0} for r in ROWS],
        "namespaces": ["ml", "research"],
        "gpus_per_namespace": {},
        "gpus_per_queue": {},
        "totals": [{"namespace": "ml", "queue": "q", "gpu_seconds": 10800.0, "jobs": 3}],
    }
    shown = run("jobs.html", answer)
    assert re.search(r'data-job="a">.*?data-field="gpu_seconds" class="number">2\.00<', shown["content"], re.S)
    assert "position 2, starts in about 5 min 0 s" in shown["content"]
    assert "position 1, no estimate" in shown["content"]
    assert re.search(r'data-field="gpu-hours">3\.00</td><td class="number">3<', shown["totals"])


TAB_JOB = {
    "kind": "TrainJob",
    "namespace": "ml",
    "name": "a",
    "state": "queued",
    "queue": "q",
    "gpus_held": 0,
    "queued_seconds": 30,
    "running_seconds": None,
    "progress": "p",
    "waiting": None,
    "failure": None,
    "timeline": [],
    "conditions": [],
    "log": None,
    "replicas": [],
    "pods": [],
    "events": [],
    "usage": {"gpus": 4, "gpu_seconds": 5400.0, "running_seconds": 1350.0, "queued_seconds": 30.0},
    "wait": {"position": 3, "estimate_seconds": 120.0, "explanation": "from 5 admissions in 10 min"},
    "chart": {"points": POINTS, "source": "the trainer's reports"},
}


def test_the_tab_reads_a_finished_job_twice_more_then_stops():
    # Its pods (the leader's final metrics) may come from a cache older than the job's own LIST.
    assert run("task_instance.html", {"job": {**TAB_JOB, "state": "succeeded"}}, ticks=10)["requests"] == 3
    assert run("task_instance.html", {"job": TAB_JOB}, ticks=10)["requests"] == 11


def test_the_tab_shows_gpu_hours_the_wait_and_the_chart():
    shown = run("task_instance.html", {"job": TAB_JOB})["content"]
    assert 'data-testid="gpu-hours">1.50<' in shown and "4 GPU(s)" in shown
    assert "position 3, starts in about 2 min 0 s" in shown and "from 5 admissions in 10 min" in shown
    assert shown.count('class="chart-point"') == 5
