"""The generic ``TrainingJobOperator`` with ``kind=`` submits the other training-operator v1 kinds."""

from __future__ import annotations

from tests.integration.conftest import unique_dag_id

XGBOOST_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    TrainingJobOperator(
        task_id="train",
        kind="XGBoostJob",
        image="docker.io/kubeflow/xgboost-dist-iris:latest",
        args=["--job_type=Train", "--model_path=/tmp/model"],
        num_workers=2,
        deferrable=True,
        wait_policy=WaitPolicy(startup_timeout=120),
    )

pipeline()
"""


def test_xgboostjob_succeeds(namespace, run_dag, jobs):
    dag_id = unique_dag_id("xgb")
    result = run_dag(dag_id, XGBOOST_DAG.format(dag_id=dag_id))

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert summary["kind"] == "XGBoostJob"
    assert summary["state"] == "succeeded"
    live = jobs.get("xgboostjobs", namespace, summary["name"])
    assert live["spec"]["xgbReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"] == "xgboost"
    assert live["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
