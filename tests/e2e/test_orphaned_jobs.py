"""A task process SIGKILLed during a synchronous wait with no retry left never runs its on_kill: its job
runs on, orphaned. The example maintenance DAG (example_dags/orphaned_job_cleanup.py), triggered through
the REST API, deletes it, and keeps the jobs of a task still waiting in its worker and of a deferred one."""

from __future__ import annotations

import signal

from airflow_provider_disttrain.ownership.naming import TASK_ID_LABEL
from airflow_provider_disttrain.ownership.orphans import KEPT_ACTIVE
from tests.e2e.airflow_rest import AirflowRest, wait_until
from tests.e2e.conftest import NAMESPACE, Cluster, job_succeeded, task_process

DAG_ID = "disttrain_e2e_orphan"
CLEANUP_DAG_ID = "disttrain_orphaned_job_cleanup"


def test_the_cleanup_dag_deletes_the_job_of_a_killed_task_and_keeps_those_of_waiting_tasks(
    e2e_dags: AirflowRest, runs: list[tuple[str, str]], cluster: Cluster
) -> None:
    airflow = e2e_dags
    wait_until(lambda: airflow.dag_exists(CLEANUP_DAG_ID), 120, f"the dag-processor to parse {CLEANUP_DAG_ID}")
    airflow.unpause(CLEANUP_DAG_ID)
    run_id = airflow.trigger(DAG_ID)
    runs.append((DAG_ID, run_id))

    def jobs_by_task() -> dict[str, dict]:
        return {job["metadata"]["labels"][TASK_ID_LABEL]: job for job in cluster.jobs(DAG_ID, run_id)}

    wait_until(lambda: len(jobs_by_task()) == 3, 240, "the three tasks to submit their jobs", interval=2)
    killed_ti = airflow.wait_for_state(DAG_ID, run_id, "killed", {"running"}, timeout=60)
    airflow.wait_for_state(DAG_ID, run_id, "waiting", {"running"}, timeout=60)
    airflow.wait_for_state(DAG_ID, run_id, "deferred", {"deferred"}, timeout=120)
    before = jobs_by_task()

    task_process(killed_ti).send_signal(signal.SIGKILL)
    # retries=0: the supervisor fails the task instance at once; no try is left to reattach, nothing ran on_kill.
    airflow.wait_for_state(DAG_ID, run_id, "killed", {"failed"}, timeout=60)
    orphan = cluster.jobs(DAG_ID, run_id)
    assert before["killed"]["metadata"]["uid"] in {job["metadata"]["uid"] for job in orphan}, "the job went away"
    assert not job_succeeded(jobs_by_task()["killed"])

    cleanup_run = airflow.trigger(CLEANUP_DAG_ID, {"grace_period_minutes": 0})
    assert airflow.wait_for_run(CLEANUP_DAG_ID, cleanup_run, timeout=180) == "success"
    report = airflow.xcom(CLEANUP_DAG_ID, cleanup_run, "delete_orphaned_jobs")

    deleted = {entry["name"]: entry for entry in report["deleted"]}
    killed_name = before["killed"]["metadata"]["name"]
    assert killed_name in deleted, report
    assert (deleted[killed_name]["run_id"], deleted[killed_name]["task_state"]) == (run_id, "failed")
    # Kept jobs are counted by reason, not listed: the waiting and deferred tasks' jobs are among those
    # kept because their task instance is active, and no action names them.
    changed = {entry["name"] for action in ("marked", "unmarked", "deleted", "errors") for entry in report[action]}
    assert not changed & {before[task]["metadata"]["name"] for task in ("waiting", "deferred")}, report
    assert report["kept"].get(KEPT_ACTIVE, 0) >= 2, report

    wait_until(lambda: "killed" not in jobs_by_task(), 30, f"{killed_name} to be gone")
    after = jobs_by_task()
    assert {task: job["metadata"]["uid"] for task, job in after.items()} == {
        task: before[task]["metadata"]["uid"] for task in ("waiting", "deferred")
    }
    # The log of the cleanup task says what it deleted, and why.
    log = airflow.log(CLEANUP_DAG_ID, cleanup_run, "delete_orphaned_jobs", try_number=1)
    assert f"delete PyTorchJob {NAMESPACE}/{killed_name}: task instance (run {run_id}) failed" in log

    for task in ("waiting", "deferred"):  # end them: their on_kill deletes their jobs
        airflow.mark(DAG_ID, run_id, task, "failed")
