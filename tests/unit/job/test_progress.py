"""Progress lines: one per meaningful change of the job, throttled per job, never lost at the end."""

from __future__ import annotations

import re
import tracemalloc
from typing import Any

import pytest

from airflow_provider_disttrain.job.progress import ProgressTracker
from airflow_provider_disttrain.job.view import JobView
from tests.unit.fakes import (
    END,
    RUNNING_AT,
    START,
    condition,
    failed_status,
    make_job,
    queued_status,
    running_status,
    succeeded_status,
    suspended_status,
)


def restarting_status(at: str) -> dict[str, Any]:
    status = running_status(workers=2)
    status["conditions"] = [
        condition("Created", START),
        condition("Running", at, status="False"),
        condition("Restarting", at, reason="PyTorchJobRestarting", message="worker-1 exited with code 1"),
    ]
    return status


def test_each_change_is_one_line_and_an_unchanged_job_none():
    tracker = ProgressTracker(interval=30, burst=3)
    queued = tracker.observe(JobView.of(make_job(status=queued_status())), now=0)
    assert queued is not None and queued.startswith("queued (Created")
    assert tracker.observe(JobView.of(make_job(status=queued_status())), now=1) is None
    running = tracker.observe(JobView.of(make_job(status=running_status(workers=2))), now=2)
    assert running is not None and running.startswith("running (Running")
    assert "replicas Master: 1 active; Worker: 2 active" in running
    done = tracker.observe(JobView.of(make_job(status=succeeded_status(workers=2))), now=3)
    assert done is not None and done.startswith("succeeded")
    assert "Master: 1 succeeded; Worker: 2 succeeded" in done


def test_a_suspended_job_says_why_it_waits_and_the_callers_reason_wins():
    tracker = ProgressTracker()
    line = tracker.observe(JobView.of(make_job(status=suspended_status())), now=0)
    assert line is not None and line.startswith("suspended (Suspended")
    quota = "couldn't assign flavors to pod set master: insufficient quota for nvidia.com/gpu"
    line = tracker.observe(JobView.of(make_job(status=suspended_status())), now=1, waiting_reason=quota)
    assert line is not None and line.endswith(f"waiting: {quota}")


def test_unschedulable_pods_named_by_a_condition_are_the_waiting_reason():
    status = queued_status()
    status["conditions"].append(
        condition("PodGroupReady", START, reason="Unschedulable", message="0/4 nodes have 8 GPUs", status="False")
    )
    line = ProgressTracker().observe(JobView.of(make_job(status=status)), now=0)
    assert line is not None and "waiting: Unschedulable 0/4 nodes have 8 GPUs" in line


def test_a_waiting_reason_is_not_repeated_once_the_job_runs():
    tracker = ProgressTracker()
    tracker.observe(JobView.of(make_job(status=queued_status())), now=0, waiting_reason="queue full")
    line = tracker.observe(JobView.of(make_job(status=running_status())), now=1, waiting_reason="queue full")
    assert line is not None and "waiting" not in line


def test_restarts_are_counted_once_each():
    tracker = ProgressTracker(interval=1)
    first = tracker.observe(JobView.of(make_job(status=restarting_status(RUNNING_AT))), now=0)
    assert first is not None and first.startswith("running (Restarting - PyTorchJobRestarting: worker-1 exited")
    assert first.endswith("restarts seen: 1")
    tracker.observe(JobView.of(make_job(status=running_status(workers=2))), now=10)
    second = tracker.observe(JobView.of(make_job(status=restarting_status(END))), now=20)
    assert second is not None and second.endswith("restarts seen: 2")
    assert (
        tracker.observe(JobView.of(make_job(status=restarting_status(END))), now=30) is None
    )  # the same restart again


def test_a_flapping_job_is_throttled_and_its_changes_coalesced():
    tracker = ProgressTracker(interval=30, burst=2)
    lines = []
    for second in range(120):  # a new restart every second for two minutes
        at = f"2024-05-01T10:{second // 60:02d}:{second % 60:02d}Z"
        lines.append(tracker.observe(JobView.of(make_job(status=restarting_status(at))), now=float(second)))
    said = [line for line in lines if line is not None]
    # A burst of 2, then one line per 30 s: at most 2 + 119 / 30.
    assert 4 <= len(said) <= 5
    assert said[-1].endswith("(30 changes since the last line)")
    seen = int(re.search(r"restarts seen: (\d+)", said[-1]).group(1))
    assert 60 < seen <= 120  # the coalesced line counts every restart up to its time


def test_a_held_back_change_is_due_later_and_written_then():
    tracker = ProgressTracker(interval=30, burst=1)
    assert tracker.observe(JobView.of(make_job(status=queued_status())), now=0) is not None
    assert tracker.seconds_until_due(now=0) is None
    assert tracker.observe(JobView.of(make_job(status=running_status())), now=5) is None
    assert tracker.seconds_until_due(now=5) == pytest.approx(25)
    # The job stays quiet: the waiter wakes when it is due and observes the same view again.
    line = tracker.observe(JobView.of(make_job(status=running_status())), now=30)
    assert line is not None and line.startswith("running")
    assert tracker.seconds_until_due(now=30) is None


def test_a_change_undone_before_it_was_written_is_not_written():
    tracker = ProgressTracker(interval=30, burst=1)
    tracker.observe(JobView.of(make_job(status=running_status(workers=2))), now=0)
    assert tracker.observe(JobView.of(make_job(status=running_status(workers=1))), now=1) is None
    assert tracker.observe(JobView.of(make_job(status=running_status(workers=2))), now=2) is None
    assert tracker.seconds_until_due(now=2) is None


def test_the_terminal_state_is_written_at_once_even_when_throttled():
    tracker = ProgressTracker(interval=300, burst=1)
    tracker.observe(JobView.of(make_job(status=running_status())), now=0)
    line = tracker.observe(JobView.of(make_job(status=failed_status())), now=1)
    assert line is not None and line.startswith("failed (Failed - BackoffLimitExceeded")


def test_a_job_kueue_evicts_while_it_runs_is_said_at_once_even_when_throttled():
    """Preempted: the training-operator suspends the running job (Running=False, reason
    PyTorchJobSuspended). Held back, the line would be replaced by "running" once it is re-admitted."""
    queued = {"kueue.x-k8s.io/queue-name": "user-queue"}
    evicted = {
        "conditions": [
            condition("Created", START),
            condition("Running", END, status="False", reason="PyTorchJobSuspended"),
            condition("Suspended", END, reason="PyTorchJobSuspended"),
        ]
    }
    tracker = ProgressTracker(interval=300, burst=1)
    tracker.observe(JobView.of(make_job(status=running_status(), labels=queued)), now=0)

    line = tracker.observe(
        JobView.of(make_job(status=evicted, labels=queued)), now=1, waiting_reason="evicted by Kueue (Preempted)"
    )

    assert line is not None and "queued by Kueue" in line and "waiting: evicted by Kueue (Preempted)" in line
    # A job that has not run yet, held the same way, waits for the throttle as any change does.
    fresh = ProgressTracker(interval=300, burst=1)
    fresh.observe(JobView.of(make_job(status=queued_status(), labels=queued)), now=0)
    assert fresh.observe(JobView.of(make_job(status=suspended_status(), labels=queued)), now=1) is None


def test_bad_throttle_settings_are_refused():
    with pytest.raises(ValueError, match="interval > 0"):
        ProgressTracker(interval=0)


def test_a_thousand_trackers_cost_little():
    """1,000 deferred jobs: each observed on every change; the memory they hold stays small.

    (Their CPU cost is measured, not asserted: ``bench/trigger_scale.py`` prints it per waiting job.)
    """
    views = [make_job(status=status) for status in (queued_status(), running_status(4), succeeded_status(4))]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    trackers = [ProgressTracker() for _ in range(1000)]
    said = sum(
        tracker.observe(JobView.of(view), now=float(i)) is not None
        for i, view in enumerate(views)
        for tracker in trackers
    )
    grown = sum(stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert said == 3000
    assert grown < 2_000_000, grown  # bytes for 1,000 trackers holding their last line


def test_a_trainjob_is_told_per_replicated_job(load_yaml):
    """The kinds table reads a TrainJob's jobsStatus[] list (statuses as the local Trainer v2.3 wrote them)."""
    tracker = ProgressTracker()
    lines = [
        tracker.observe(JobView.of(load_yaml(f"status/trainjob-{name}.yaml")), now=i)
        for i, name in enumerate(("suspended", "running", "complete"))
    ]
    assert lines[0] is not None and lines[0].startswith("suspended (Suspended")
    assert lines[1] is not None and lines[1].startswith("running") and lines[1].endswith("replicas node: 1 active")
    assert lines[2] is not None and lines[2].startswith("succeeded (Complete")
    assert lines[2].endswith("replicas node: 1 succeeded")
