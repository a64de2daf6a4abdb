"""The trainer's own progress report (a TrainJob's ``status.trainerStatus``, Trainer v2.3's TrainJobStatus gate):
read, shown in the progress lines and carried in the result. Fixtures: TrainJobs read back from the local
cluster's API server with the real Trainer controller running them (tests/fixtures/status/*-progress.yaml)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_provider_disttrain.job.kinds import kind_of
from airflow_provider_disttrain.job.progress import ProgressTracker
from airflow_provider_disttrain.job.trainer_status import (
    MAX_METRICS_SHOWN,
    describe_progress,
    metric_value,
    trainer_progress,
)
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.pods.metrics import combined_metrics
from tests.unit.conftest import read_yaml


def running() -> dict[str, Any]:
    return read_yaml("status/trainjob-running-progress.yaml")


def complete() -> dict[str, Any]:
    return read_yaml("status/trainjob-complete-progress.yaml")


def test_the_running_trainjob_s_report_is_read_as_the_trainer_wrote_it() -> None:
    job = running()
    reported = trainer_progress(job, kind_of(job))

    raw = job["status"]["trainerStatus"]
    assert reported is not None
    assert (reported.percentage, reported.remaining_seconds) == (40, 150)
    assert reported.metrics == tuple((m["name"], m["value"]) for m in raw["metrics"])  # the trainer's order
    assert reported.updated == raw["lastUpdatedTime"]
    assert reported.metric_values() == {"loss": 0.4172, "eval_accuracy": 0.8125, "epoch": 2}


@pytest.mark.parametrize(
    "job",
    [
        read_yaml("status/trainjob-running.yaml"),  # the gate off, or a trainer that does not report
        {**read_yaml("status/pytorchjob-running.yaml"), "status": {"trainerStatus": {"progressPercentage": 5}}},
    ],
    ids=["trainjob-without-report", "kind-without-trainer-status"],
)
def test_no_report_is_none(job: dict[str, Any]) -> None:
    assert trainer_progress(job, kind_of(job)) is None
    assert "trainer_status" not in JobView.of(job).result(str(job["kind"]))


def test_a_partial_report_leaves_the_rest_unknown() -> None:
    job = running()
    job["status"]["trainerStatus"] = {"lastUpdatedTime": "2026-12-02T07:39:04Z", "metrics": [{"value": "1"}]}
    reported = trainer_progress(job, kind_of(job))

    assert reported is not None
    assert (reported.percentage, reported.remaining_seconds, reported.metrics) == (None, None, ())
    assert describe_progress(reported) == "trainer reported no progress yet"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.0831", 0.0831),
        ("3", 3),
        ("-1e-3", -0.001),
        ("nan", "nan"),
        ("NaN", "NaN"),
        ("true", "true"),
        ("1.0x", "1.0x"),
    ],
)
def test_metric_values_that_are_numbers_become_numbers(text: str, value: Any) -> None:
    assert metric_value(text) == value
    assert type(metric_value(text)) is type(value)


def test_the_line_says_percentage_time_left_and_the_latest_metrics() -> None:
    job = running()
    reported = trainer_progress(job, kind_of(job))
    assert reported is not None
    assert (
        describe_progress(reported) == "trainer 40 %, about 2 min 30 s left, loss=0.4172 eval_accuracy=0.8125 epoch=2"
    )


@pytest.mark.parametrize(("seconds", "said"), [(0, "0 s"), (59, "59 s"), (3599, "59 min 59 s"), (3900, "1 h 05 min")])
def test_time_left_reads_as_a_person_would_say_it(seconds: int, said: str) -> None:
    job = running()
    job["status"]["trainerStatus"] = {"estimatedRemainingSeconds": seconds, "lastUpdatedTime": "2026-12-02T07:39:04Z"}
    reported = trainer_progress(job, kind_of(job))
    assert reported is not None
    assert describe_progress(reported) == f"trainer about {said} left"


def test_many_metrics_are_cut_to_a_few_and_counted() -> None:
    job = running()
    job["status"]["trainerStatus"]["metrics"] = [{"name": f"m{i}", "value": str(i)} for i in range(11)]
    reported = trainer_progress(job, kind_of(job))
    assert reported is not None
    line = describe_progress(reported)
    assert line.count("=") == MAX_METRICS_SHOWN
    assert line.endswith(f"m{MAX_METRICS_SHOWN - 1}={MAX_METRICS_SHOWN - 1} (+{11 - MAX_METRICS_SHOWN} more)")


def test_the_progress_line_carries_the_report_and_a_new_report_is_a_new_line() -> None:
    tracker = ProgressTracker(interval=30, burst=3)
    job = running()

    first = tracker.observe(JobView.of(job), now=0)
    assert first is not None and first.endswith(
        "| trainer 40 %, about 2 min 30 s left, loss=0.4172 eval_accuracy=0.8125 epoch=2"
    )
    assert tracker.observe(JobView.of(copy.deepcopy(job)), now=1) is None  # the same report: nothing new

    later = copy.deepcopy(job)
    later["status"]["trainerStatus"].update(progressPercentage=55, estimatedRemainingSeconds=100)
    second = tracker.observe(JobView.of(later), now=2)
    assert second is not None and "trainer 55 %, about 1 min 40 s left" in second


def test_the_final_line_and_the_result_carry_the_last_report() -> None:
    job = complete()
    line = ProgressTracker().observe(JobView.of(job), now=0)
    assert line is not None and "trainer 100 %, about 0 s left, loss=0.0831" in line

    result = JobView.of(job).result("TrainJob")
    assert result["trainer_status"] == {
        "progress_percentage": 100,
        "estimated_remaining_seconds": 0,
        "metrics": {"loss": 0.0831, "eval_accuracy": 0.9612, "epoch": 3},
        "last_updated_time": job["status"]["trainerStatus"]["lastUpdatedTime"],
    }


def test_the_termination_message_wins_a_name_both_have_and_the_trainer_adds_the_rest() -> None:
    trainer = JobView.of(complete()).result("TrainJob")["trainer_status"]
    leader = {"loss": 0.07912, "tokens": 123456}

    assert combined_metrics(leader, trainer) == {"loss": 0.07912, "eval_accuracy": 0.9612, "epoch": 3, "tokens": 123456}
    assert combined_metrics(None, trainer) == trainer["metrics"]
    assert combined_metrics(leader, None) == leader
    assert combined_metrics(None, {**trainer, "metrics": {}}) is None
    assert combined_metrics(None, None) is None
