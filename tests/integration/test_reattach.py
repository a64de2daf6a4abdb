"""A retry never creates a second job: the try that died after submitting leaves a running job, and the
next try reattaches to it, through Airflow's task state store or, where there is none, the labels."""

from __future__ import annotations

import pytest

from tests.integration.conftest import unique_dag_id

DYING_FIRST_TRY_DAG = '''
from datetime import timedelta

import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator


class WorkerDiesAfterSubmitting(PyTorchJobOperator):
    """Try 1 submits its job, then its worker "dies" while waiting (the job keeps running)."""

    def execute(self, context):
        if {without_state_store}:
            context.pop("task_state_store", None)  # an Airflow without the store: labels must do
        return super().execute(context)

    def _wait(self, hook, ref, startup_deadline):
        if self._try_number == 1:
            raise RuntimeError("worker lost while waiting for " + ref.name)
        return super()._wait(hook, ref, startup_deadline)

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
        poll_interval=1,
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
