"""Processes of the deployment die or restart while training tasks wait: a task process killed during
a synchronous wait, a scheduler restarted. Every task still succeeds, with exactly one job per task
instance. (A triggerer lost with its supervisor, its triggers taken over by the other triggerer:
test_triggerer_ha.py.)"""

from __future__ import annotations

import signal
import time

from tests.e2e.airflow_rest import AirflowRest, wait_until
from tests.e2e.conftest import (
    FANOUT,
    Cluster,
    Process,
    assert_one_succeeded_job_per_task_instance,
    job_succeeded,
    start_fanout,
    task_process,
    wait_for_health,
)

SYNC = "disttrain_e2e_sync"


def test_a_task_process_killed_during_a_synchronous_wait_is_retried_and_reattaches(
    e2e_dags: AirflowRest, runs: list[tuple[str, str]], cluster: Cluster
) -> None:
    airflow = e2e_dags
    run_id = airflow.trigger(SYNC)
    runs.append((SYNC, run_id))
    wait_until(lambda: cluster.jobs(SYNC, run_id), 180, "the task to submit its job")
    ti = airflow.wait_for_state(SYNC, run_id, "train", {"running"}, timeout=60)
    [job] = cluster.jobs(SYNC, run_id)

    process = task_process(ti)
    process.send_signal(signal.SIGKILL)
    killed = time.monotonic()

    # The job is held suspended until the retry has reattached, however long the retry takes to start.
    def reattached() -> bool:
        if airflow.task_instance(SYNC, run_id, "train")["try_number"] < 2:
            return False
        try:
            return "Reattached to" in airflow.log(SYNC, run_id, "train", try_number=2)
        except AssertionError:  # the second try has not written its log yet
            return False

    wait_until(reattached, 180, "the second try to reattach", interval=2)
    assert cluster.release_jobs(SYNC, run_id) == 1

    assert airflow.wait_for_run(SYNC, run_id, timeout=240) == "success"
    tries = airflow.tries(SYNC, run_id, "train")
    # The first try ended when its process died (failed, then up for retry); the second succeeded.
    assert len(tries) == 2 and tries[0]["state"] in {"failed", "up_for_retry"} and tries[1]["state"] == "success"
    jobs = cluster.jobs(SYNC, run_id)
    assert [j["metadata"]["uid"] for j in jobs] == [job["metadata"]["uid"]], "the retry did not reattach"
    assert job_succeeded(jobs[0])
    print(f"\n[worker death] the retry reattached; run finished {time.monotonic() - killed:.0f}s after the kill")


def test_a_scheduler_restart_while_tasks_are_deferred_changes_nothing(
    e2e_dags: AirflowRest, runs: list[tuple[str, str]], cluster: Cluster, scheduler: Process
) -> None:
    airflow = e2e_dags
    run_id = start_fanout(airflow, runs, count=5)

    stopped = scheduler.restart()
    scheduler.wait_restarted(stopped)
    wait_for_health(airflow, "scheduler")
    assert cluster.release_jobs(FANOUT, run_id) == 5

    assert airflow.wait_for_run(FANOUT, run_id, timeout=240) == "success"
    assert_one_succeeded_job_per_task_instance(airflow, cluster, FANOUT, run_id, 5)
    for ti in airflow.task_instances(FANOUT, run_id, "train"):
        assert [t["state"] for t in airflow.tries(FANOUT, run_id, "train", ti["map_index"])] == ["success"]
