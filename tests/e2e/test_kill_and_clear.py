"""A user kills a deferred training task through the REST API (mark failed, clear): the live triggerer
runs the trigger's on_kill and the job is deleted within 30 s; a cleared task's new try submits a
fresh job."""

from __future__ import annotations

import time

from tests.e2e.airflow_rest import AirflowRest, wait_until
from tests.e2e.conftest import Cluster, job_succeeded

DAG_ID = "disttrain_e2e_long"
KILL_DEADLINE = 30


def start_deferred(airflow: AirflowRest, cluster: Cluster, runs: list[tuple[str, str]]) -> tuple[str, dict]:
    """Triggers the long-running DAG; returns its run id and its job once the task waits in the triggerer."""
    run_id = airflow.trigger(DAG_ID)
    runs.append((DAG_ID, run_id))
    wait_until(
        lambda: (ti := airflow.task_instance(DAG_ID, run_id, "train"))["state"] == "deferred" and ti["triggerer_job"],
        180,
        "the training task to be deferred in the triggerer",
    )
    jobs = cluster.jobs(DAG_ID, run_id)
    assert len(jobs) == 1
    return run_id, jobs[0]


def test_marking_a_deferred_task_failed_deletes_its_job(
    e2e_dags: AirflowRest, runs: list[tuple[str, str]], cluster: Cluster
) -> None:
    airflow = e2e_dags
    run_id, job = start_deferred(airflow, cluster, runs)

    airflow.mark(DAG_ID, run_id, "train", "failed")
    marked = time.monotonic()
    wait_until(lambda: not cluster.jobs(DAG_ID, run_id), KILL_DEADLINE, f"{job['metadata']['name']} to be deleted")
    print(f"\n[mark failed] job deleted {time.monotonic() - marked:.1f}s after the task was marked failed")

    assert airflow.task_instance(DAG_ID, run_id, "train")["state"] == "failed"
    # The triggerer's lines in the first try's log: Airflow's own, then the trigger's.
    assert "Trigger cancelled by user action, invoking on_kill" in airflow.log(DAG_ID, run_id, "train", try_number=1)


def test_clearing_a_deferred_task_deletes_its_job_and_the_new_try_submits_a_fresh_one(
    e2e_dags: AirflowRest, runs: list[tuple[str, str]], cluster: Cluster
) -> None:
    airflow = e2e_dags
    run_id, first_job = start_deferred(airflow, cluster, runs)
    first_uid = first_job["metadata"]["uid"]

    airflow.clear(DAG_ID, run_id, "train")
    cleared = time.monotonic()
    wait_until(
        lambda: all(job["metadata"]["uid"] != first_uid for job in cluster.jobs(DAG_ID, run_id)),
        KILL_DEADLINE,
        f"the first try's job {first_job['metadata']['name']} to be deleted",
    )
    print(f"\n[clear] first try's job deleted {time.monotonic() - cleared:.1f}s after the clear")
    # The triggerer's lines in the first try's log: Airflow's own, then the trigger's.
    assert "Trigger cancelled by user action, invoking on_kill" in airflow.log(DAG_ID, run_id, "train", try_number=1)

    # The second try's job runs 20 s (see the DAG): the run ends in success on a job of its own.
    state = airflow.wait_for_run(DAG_ID, run_id, timeout=180)
    assert state == "success", airflow.log(DAG_ID, run_id, "train", try_number=2)[-3000:]
    ti = airflow.task_instance(DAG_ID, run_id, "train")
    assert ti["try_number"] == 2
    jobs = cluster.jobs(DAG_ID, run_id)
    assert len(jobs) == 1
    assert jobs[0]["metadata"]["uid"] != first_uid
    assert jobs[0]["metadata"]["labels"]["disttrain.airflow.apache.org/try-number"] == "2"
    assert job_succeeded(jobs[0])
