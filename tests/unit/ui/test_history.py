"""The tab's chart data: a bounded history of each job's reported metrics, from the jobs the UI reads anyway."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_disttrain.ui.history import MetricHistory
from tests.unit.fakes import END, RUNNING_AT, make_pod

STATUS = Path(__file__).resolve().parents[2] / "fixtures" / "status"


def reported(job: dict[str, Any], at: str, **metrics: str) -> dict[str, Any]:
    """``job`` with the trainer's report at ``at`` of ``metrics`` (strings, as the status holds them)."""
    job = copy.deepcopy(job)
    job["status"]["trainerStatus"]["lastUpdatedTime"] = at
    job["status"]["trainerStatus"]["metrics"] = [{"name": name, "value": value} for name, value in metrics.items()]
    return job


def epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()


TRAINJOB = yaml.safe_load((STATUS / "trainjob-running-progress.yaml").read_text())


def test_each_new_report_becomes_a_point_once_and_only_numbers_are_kept():
    history = MetricHistory()
    first = reported(TRAINJOB, "2026-12-02T07:39:04Z", loss="0.9", note="warming up")
    second = reported(TRAINJOB, "2026-12-02T07:39:14Z", loss="0.5", eval_accuracy="0.7")
    for job in (first, first, second, second, first):  # the same LIST served to many requests, an older one
        history.record(job)
    chart = history.chart(second)
    assert chart["points"] == [
        {"t": epoch("2026-12-02T07:39:04Z"), "values": {"loss": 0.9}},
        {"t": epoch("2026-12-02T07:39:14Z"), "values": {"loss": 0.5, "eval_accuracy": 0.7}},
    ]
    assert "trainerStatus" in chart["source"]


def test_a_process_that_saw_no_report_yet_charts_the_latest_one():
    chart = MetricHistory().chart(TRAINJOB)
    assert chart["points"] == [
        {"t": epoch("2026-12-02T07:39:04Z"), "values": {"loss": 0.4172, "eval_accuracy": 0.8125, "epoch": 2.0}}
    ]


def test_the_history_is_bounded_in_points_per_job_and_in_jobs():
    history = MetricHistory(max_jobs=2, max_points=3)
    for second in range(10):
        history.record(last := reported(TRAINJOB, f"2026-12-02T07:40:{second:02d}Z", loss=str(second)))
    assert [p["values"]["loss"] for p in history.chart(last)["points"]] == [7.0, 8.0, 9.0]
    others = []
    for uid in ("b", "c"):
        other = reported(TRAINJOB, "2026-12-02T07:41:00Z", loss="1")
        other["metadata"]["uid"] = uid
        history.record(other)
        others.append(other)
    # The first job is the least recently seen: its series went; it is back to its latest report alone.
    assert [p["values"]["loss"] for p in history.chart(last)["points"]] == [9.0]
    assert len(history.chart(others[1])["points"]) == 1


def test_a_job_without_a_trainer_status_charts_the_leaders_final_metrics():
    job = {"kind": "PyTorchJob", "metadata": {"name": "j", "uid": "u1"}, "status": {}}
    state = {"reason": "Completed", "exitCode": 0, "startedAt": RUNNING_AT, "finishedAt": END}
    pods = [
        make_pod("j", "worker", 0, terminated={**state, "message": '{"loss": 9}'}),
        make_pod(
            "j",
            "master",
            0,
            terminated={**state, "message": '{"loss": 0.2, "accuracy": 0.93, "run": "x", "grad": Infinity}'},
        ),
    ]
    history = MetricHistory()
    history.record(job)
    assert history.chart(job) == {"points": [], "source": ""}
    chart = history.chart(job, pods)
    assert chart["points"] == [{"t": epoch(END), "values": {"loss": 0.2, "accuracy": 0.93}}]
    assert chart["source"] == "the leader's termination message"
