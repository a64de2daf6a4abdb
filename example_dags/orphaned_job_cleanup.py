"""Maintenance: delete training jobs whose Airflow task has ended without cleaning up after itself.

A training task whose worker process is SIGKILLed (OOM killer, node lost, ``kill -9``) never runs its
``on_kill``; with no retry left, its job keeps running and holding GPUs with nobody waiting for it.
Platform teams schedule this DAG once per namespace the provider's tasks submit to. Each run lists the
jobs carrying the provider's task-instance labels, asks Airflow for those task instances' states, and
deletes the unfinished jobs whose task instance has ended (success, failed, skipped, upstream_failed,
removed) for longer than the grace period. Jobs of running, deferred or retrying tasks, jobs submitted
with ``wait_for_completion=False``, finished jobs and jobs no task instance of this Airflow matches are
never touched. The task's log and its XCom (``deleted``, ``marked``, ``unmarked``, ``errors``) say what
happened to each job it changed and why; ``kept`` counts the other jobs by reason.

Trigger it by hand with ``report_only`` to see what a run would delete, or with a grace period of 0
to delete right away. The service account of ``kubernetes_default`` needs ``list``, ``patch`` and
``delete`` on the job kinds (deploy/rbac/role.yaml grants them).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from airflow_provider_disttrain import DeleteOrphanedTrainingJobsOperator


@dag(
    dag_id="disttrain_orphaned_job_cleanup",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "grace_period_minutes": Param(30, type="integer", minimum=0, description="how long a job stays orphaned"),
        "report_only": Param(False, type="boolean", description="only report what would be deleted"),
    },
    tags=["disttrain", "example", "maintenance"],
)
def orphaned_job_cleanup() -> None:
    DeleteOrphanedTrainingJobsOperator(
        task_id="delete_orphaned_jobs",
        grace_period="{{ params.grace_period_minutes * 60 }}",
        report_only="{{ params.report_only }}",
    )


orphaned_job_cleanup()
