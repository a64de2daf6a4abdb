"""One triggerer holding 100 deferred training tasks (one mapped task) at once: all succeed, one job
each, and the triggerer's memory is reported before and while they wait. The jobs are created
suspended and released once all 100 wait, so the test does not race the machine's speed."""

from __future__ import annotations

import time

import pytest

from tests.e2e.airflow_rest import AirflowRest, wait_until
from tests.e2e.conftest import Cluster, Process, deferred_count, job_succeeded, since

DAG_ID = "disttrain_e2e_fanout"
COUNT = 100


@pytest.mark.timeout(1200)  # two 500 s waits at most, above pyproject's 600 s per test
def test_one_triggerer_holds_100_deferred_training_tasks(
    e2e_dags: AirflowRest, runs: list[tuple[str, str]], cluster: Cluster, triggerer: Process
) -> None:
    airflow = e2e_dags
    # A fresh triggerer, so that "before" is its memory at start and not what earlier tests left.
    triggerer.wait_restarted(triggerer.restart())
    wait_until(lambda: len(triggerer.children()) >= 2, 60, "the new triggerer's trigger runner and log server")
    time.sleep(5)
    rss_before = triggerer.rss_mb()
    started = time.monotonic()
    run_id = airflow.trigger(DAG_ID, {"count": COUNT, "run_seconds": 5})
    runs.append((DAG_ID, run_id))

    # The jobs are held suspended: every task ends up deferred, its trigger in the triggerer.
    wait_until(lambda: deferred_count(airflow, DAG_ID, run_id) == COUNT, 500, f"{COUNT} deferred tasks", interval=3)
    all_deferred_after = since(started)
    time.sleep(10)  # the trigger runner starts newly assigned triggers within a few seconds
    rss_waiting = triggerer.rss_mb()
    assert deferred_count(airflow, DAG_ID, run_id) == COUNT

    assert cluster.release_jobs(DAG_ID, run_id) == COUNT
    assert airflow.wait_for_run(DAG_ID, run_id, timeout=500) == "success"
    tis = airflow.task_instances(DAG_ID, run_id, "train")
    assert len(tis) == COUNT and {ti["state"] for ti in tis} == {"success"}
    per_task_instance = cluster.jobs_per_task_instance(DAG_ID, run_id)
    assert len(per_task_instance) == COUNT
    assert all(len(jobs) == 1 and job_succeeded(jobs[0]) for jobs in per_task_instance.values())

    print(f"\n[triggerer memory] RSS in MB, before -> while {COUNT} deferred training tasks wait:")
    for role, before in rss_before.items():
        print(f"  {role:<24} {before:6.0f} -> {rss_waiting.get(role, float('nan')):6.0f}")
    total_before, total_waiting = sum(rss_before.values()), sum(rss_waiting.values())
    print(f"  {'total':<24} {total_before:6.0f} -> {total_waiting:6.0f} (+{total_waiting - total_before:.0f})")
    print(f"  all {COUNT} deferred {all_deferred_after:.0f}s after the trigger, run done after {since(started):.0f}s")
