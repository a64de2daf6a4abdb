"""bench/finish_latency_e2e.py: its pure parts (times from the REST API and the task log, the table).

The benchmark itself needs the local deployment (make airflow-up) and prints figures; these tests
check what those figures are computed from.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # as when run as a script: it imports trigger_scale_lib
    return load_script(BENCH / "finish_latency_e2e.py", "finish_latency_e2e")


def test_epoch_reads_the_rest_apis_times(bench: ModuleType) -> None:
    assert bench.epoch("1970-01-01T00:00:10.250000Z") == 10.25
    assert bench.epoch("1970-01-01T01:00:10+01:00") == 10.0
    assert bench.epoch(None) is None and bench.epoch("") is None
    with pytest.raises(ValueError, match="time zone"):
        bench.epoch("1970-01-01T00:00:10")


def test_log_times_are_the_first_trigger_fired_line_and_the_next_task_start(bench: ModuleType) -> None:
    lines = [
        "::group::Log message source details",
        {"timestamp": "1970-01-01T00:00:00.5Z", "event": "::group::Pre Execute"},  # the deferring process
        {"timestamp": "1970-01-01T00:00:01Z", "event": "PyTorchJob ns/a: running"},
        {"timestamp": "1970-01-01T00:00:02.5Z", "event": "Trigger fired event", "result": "TriggerEvent<...>"},
        {"timestamp": "1970-01-01T00:00:02.6Z", "event": "trigger completed"},
        {"timestamp": "1970-01-01T00:00:04Z", "event": "::group::Pre Execute"},
        {"timestamp": "1970-01-01T00:00:09Z", "event": "Trigger fired event"},
        {"timestamp": "1970-01-01T00:00:10Z", "event": "::group::Pre Execute"},
    ]
    assert bench.log_times(lines) == (2.5, 4.0)
    assert bench.log_times(lines[:5]) == (2.5, None)
    assert bench.log_times(lines[:3]) == (None, None)


def test_stage_times_of_a_resumed_task_instance(bench: ModuleType) -> None:
    ti = {
        "scheduled_when": "1970-01-01T00:00:03Z",
        "queued_when": "1970-01-01T00:00:04Z",
        "end_date": "1970-01-01T00:00:06Z",
    }
    lines = [
        {"timestamp": "1970-01-01T00:00:02Z", "event": "Trigger fired event"},
        {"timestamp": "1970-01-01T00:00:05Z", "event": "::group::Pre Execute"},
    ]
    assert bench.stage_times(ti, lines) == {"fired": 2.0, "scheduled": 3.0, "queued": 4.0, "resumed": 5.0, "ended": 6.0}
    stages = ("fired", "scheduled", "queued", "resumed", "ended")
    assert bench.stage_times({"end_date": None}, []) == dict.fromkeys(stages)


def test_stage_delays_count_from_each_jobs_succeeded_and_skip_missing_times(bench: ModuleType) -> None:
    succeeded_at = {0: 100.0, 1: 200.0, 2: 300.0}
    times = {
        0: {"fired": 100.5, "scheduled": 101.0, "queued": 102.0, "resumed": 103.0, "ended": 104.0},
        1: {"fired": None, "scheduled": 200.25, "queued": 203.0, "resumed": None, "ended": 205.0},
        # 2: no task instance read (not in times at all); 3: a task instance whose job was never seen
        3: {"fired": 1.0, "scheduled": 1.0, "queued": 1.0, "resumed": 1.0, "ended": 1.0},
    }
    assert bench.stage_delays(succeeded_at, times) == {
        "fired": [0.5],
        "scheduled": [1.0, 0.25],
        "queued": [2.0, 3.0],
        "resumed": [3.0],
        "ended": [4.0, 5.0],
    }


def test_spans_between_two_stages_of_each_task(bench: ModuleType) -> None:
    times = {
        1: {"queued": 10.0, "resumed": 12.5, "ended": 20.0},
        0: {"queued": 1.0, "resumed": None, "ended": 5.0},
        2: {"queued": 3.0, "resumed": 4.0},
    }
    assert bench.spans(times, "queued", "resumed") == [2.5, 1.0]
    assert bench.spans(times, "resumed", "ended") == [7.5]
    assert bench.summary([1.0, 2.0, 3.0]) == "2.00 / 2.98 / 3.00 s"
    assert bench.summary([]) == "n/a"


def test_format_table(bench: ModuleType) -> None:
    delays = {"fired": [], "scheduled": [1.0, 2.0, 3.0], "queued": [2.0, 4.0, 6.0], "ended": [5.0] * 3}  # no "resumed"
    lines = bench.format_table(delays, 4)
    assert len(lines) == 2 + len(bench.STAGES)
    assert lines[0].split()[-4:] == ["p50", "p99", "max", "tasks"]
    assert set(lines[1]) == {"-", " "}
    assert len({len(line) for line in lines[:2]}) == 1  # header and rule aligned
    fired, scheduled, queued, resumed, ended = lines[2:]
    assert fired.startswith("trigger fired") and fired.split()[-4:] == ["n/a", "n/a", "n/a", "0/4"]
    assert scheduled.split()[-7:] == ["2.00", "s", "2.98", "s", "3.00", "s", "3/4"]
    assert queued.split()[-7:] == ["4.00", "s", "5.96", "s", "6.00", "s", "3/4"]
    assert resumed.startswith("resumed task started") and resumed.split()[-1] == "0/4"
    assert ended.startswith("task ended (end_date)") and ended.split()[-7:] == ["5.00", "s"] * 3 + ["3/4"]
    # the figures' columns are right-aligned under their headers
    assert len({len(line) for line in lines}) == 1


def test_percentiles_are_the_scale_benchmarks(bench: ModuleType) -> None:
    assert bench._p50([1.0, 3.0]) == 2.0 and math.isclose(bench._p99([0.0, 100.0]), 99.0)
