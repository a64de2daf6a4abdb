"""A retry never creates a second job: the try that died after submitting leaves a running job, and the
next try reattaches to it, through Airflow's task state store or, where there is none, the labels."""

from __future__ import annotations

import pytest

from tests.integration.conftest import unique_dag_id

DYING_FIRST_TRY_DAG = '''
from datetime import timedelta

import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator


class WorkerDiesAfterSubmitting(PyTorchJobOperator):
    """Try 1 submits its job, then its worker "dies" while waiting (the job keeps running)."""

    def execute(self, context):
        if {without_state_store}:
            context.pop("task_state_store", None)  # an Airflow without the store: labels must do
        return super().execute(context)

    def _wait(self, hook, ref, *arguments):
        if self._try_number == 1:
            raise RuntimeError("worker lost while waiting for " + ref.name)
        return super()._wait(hook, ref, *arguments)

    def build_job_manifest(self, context, default_namespace):
        self._try_number = context["ti"].try_number
        return super().build_job_manifest(context, default_namespace)


@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    WorkerDiesAfterSubmitting(
        task_id="train",
        image="busybox:1.36",
        command=["python", "train.py"],
        num_workers=1,
        annotations={{"disttrain.test/run-seconds": "20"}},
        wait_policy=WaitPolicy(poll_interval=1),
        retries=1,
        retry_delay=timedelta(seconds=0),
    )

pipeline()
'''


@pytest.mark.parametrize("without_state_store", [False, True], ids=["task-state-store", "labels"])
def test_retry_reattaches_to_the_job_of_the_try_that_died(namespace, run_dag, jobs, without_state_store):
    dag_id = unique_dag_id("reattach")
    result = run_dag(dag_id, DYING_FIRST_TRY_DAG.format(dag_id=dag_id, without_state_store=without_state_store))

    assert result.task_state("train") == "success"
    created = jobs.list("pytorchjobs", namespace)
    assert len(created) == 1, [job["metadata"]["name"] for job in created]
    job = created[0]
    # The one job is the first try's, and the second try's result is that job's.
    assert job["metadata"]["labels"]["disttrain.airflow.apache.org/try-number"] == "1"
    assert result.xcom("train")["uid"] == job["metadata"]["uid"]
    assert result.xcom("train")["state"] == "succeeded"


DYING_AFTER_SUCCESS_DAG = '''
from datetime import timedelta

import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.ownership.identity import JobIdentity, task_instance_keys_of
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator


class WorkerDiesAfterTheJobSucceeded(PyTorchJobOperator):
    """Try 1 sees its job succeed, then its worker "dies": {when}."""

    def build_job_manifest(self, context, default_namespace):
        self._try_number = context["ti"].try_number
        return super().build_job_manifest(context, default_namespace)

    def _wait(self, hook, ref, *arguments):
        outcome = super()._wait(hook, ref, *arguments)
        if {when!r} == "before the ending" and self._try_number == 1:
            raise RuntimeError("worker lost after " + ref.name + " succeeded")
        return outcome

    def identity(self, context):
        return LoggedIdentity(
            self.hook, self.kind, task_instance_keys_of(context["ti"]), context.get("task_state_store"), self.log,
            try_number=context["ti"].try_number,
        )


class LoggedIdentity(JobIdentity):
    """Logs which job each try claims; "dies" after deleting the succeeded job, if told to."""

    def __init__(self, *args, try_number, **kwargs):
        super().__init__(*args, **kwargs)
        self.try_number = try_number

    def claim(self, manifest, **kwargs):
        job, reattached = super().claim(manifest, **kwargs)
        with open({created_log!r}, "a") as log:
            log.write(f"{{self.try_number}} {{job['metadata']['uid']}} {{reattached}}\\n")
        return job, reattached

    def remember(self, ref, **fields):
        if {when!r} == "after the cleanup" and "task_succeeded" in fields and self.try_number == 1:
            raise RuntimeError("worker lost after deleting the succeeded job")
        return super().remember(ref, **fields)


@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    WorkerDiesAfterTheJobSucceeded(
        task_id="train",
        image="busybox:1.36",
        command=["python", "train.py"],
        num_workers=1,
        wait_policy=WaitPolicy(poll_interval=1),
        cleanup_policy=CleanupPolicy(on_finish={delete_on_finish!r}),
        retries=1,
        retry_delay=timedelta(seconds=0),
    )

pipeline()
'''


@pytest.mark.parametrize(
    ("when", "delete_on_finish"),
    [("before the ending", "never"), ("after the cleanup", "succeeded")],
    ids=["job-kept", "job-deleted"],
)
def test_a_retry_after_the_job_succeeded_returns_its_result_without_training_again(
    namespace, run_dag, jobs, tmp_path, when, delete_on_finish
):
    dag_id = unique_dag_id("retry_after_success")
    created_log = tmp_path / "submissions.txt"
    source = DYING_AFTER_SUCCESS_DAG.format(
        dag_id=dag_id, when=when, delete_on_finish=delete_on_finish, created_log=str(created_log)
    )

    result = run_dag(dag_id, source)

    assert result.task_state("train") == "success"
    summary = result.xcom("train")
    assert summary["state"] == "succeeded"
    # One job was submitted, by try 1, and it is the one whose result the task returned.
    submissions = created_log.read_text().splitlines()
    assert submissions[0] == f"1 {summary['uid']} False"
    assert all(not line.startswith("2 ") or line.endswith(" True") for line in submissions)
    remaining = jobs.list("pytorchjobs", namespace)
    if delete_on_finish == "never":
        # The one job is the first try's: the retry took its result and trained nothing.
        assert [job["metadata"]["uid"] for job in remaining] == [summary["uid"]]
        assert remaining[0]["metadata"]["labels"]["disttrain.airflow.apache.org/try-number"] == "1"
    else:
        # The first try deleted it before dying; the retry returned the result it had saved.
        jobs.wait_for(lambda: jobs.list("pytorchjobs", namespace) == [], 60, "the deletion to finish")
