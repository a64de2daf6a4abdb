"""The sensor and the delete, scale, suspend and resume operators, against live jobs."""

from __future__ import annotations

import pytest

from tests.integration.conftest import ADMIN_KUBECONFIG, unique_dag_id

LONG_RUNNING = {"disttrain.test/run-seconds": "600"}

MANAGE_DAG = '''
import pendulum
from airflow.sdk import chain, dag, task
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import PyTorchOptions
from airflow_provider_disttrain.operators.manage import (
    DeleteTrainingJobOperator, ResumeTrainingJobOperator, ScaleTrainingJobOperator, SuspendTrainingJobOperator,
)

NAME = "{{{{ ti.xcom_pull(task_ids='start', key='job_name') }}}}"
ADMIN_KUBECONFIG = {admin_kubeconfig!r}


@task
def pods_become(count, suspended=False, ti=None):
    """Check the cluster between two operators: the job's pods (and Suspended condition) follow."""
    import time
    from kubernetes import client, config

    name = ti.xcom_pull(task_ids="start", key="job_name")
    namespace = ti.xcom_pull(task_ids="start", key="job_namespace")
    api = config.new_client_from_config(config_file=ADMIN_KUBECONFIG)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    deadline = time.monotonic() + 60
    while True:
        pods = core.list_namespaced_pod(namespace, label_selector=f"training.kubeflow.org/job-name={{name}}").items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        job = custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)
        conditions = {{c["type"]: c["status"] for c in job.get("status", {{}}).get("conditions", [])}}
        if len(live) == count and (conditions.get("Suspended") == "True") == suspended:
            return len(live)
        if time.monotonic() > deadline:
            raise AssertionError(f"want {{count}} pods, suspended={{suspended}}: {{len(live)}}, {{conditions}}")
        time.sleep(0.5)

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    start = PyTorchJobOperator(
        task_id="start",
        image="busybox:1.36",
        command=["torchrun", "train.py"],
        num_workers=2,
        pytorch_options=PyTorchOptions(elastic_policy={{"min_replicas": 1, "max_replicas": 4, "rdzv_backend": "c10d"}}),
        annotations={annotations!r},
        wait_for_completion=False,
    )
    scale = ScaleTrainingJobOperator(task_id="scale", job_name=NAME, replicas=3)
    suspend = SuspendTrainingJobOperator(task_id="suspend", job_name=NAME)
    resume = ResumeTrainingJobOperator(task_id="resume", job_name=NAME)
    delete = DeleteTrainingJobOperator(task_id="delete", job_name=NAME)
    chain(
        start, pods_become.override(task_id="two_workers")(2),
        scale, pods_become.override(task_id="three_workers")(3),
        suspend, pods_become.override(task_id="no_pods_while_suspended")(0, suspended=True),
        resume, pods_become.override(task_id="three_workers_again")(3),
        delete,
    )

pipeline()
'''


def test_scale_suspend_resume_delete_a_live_elastic_job(namespace, run_dag, jobs):
    dag_id = unique_dag_id("manage")
    result = run_dag(
        dag_id, MANAGE_DAG.format(dag_id=dag_id, annotations=LONG_RUNNING, admin_kubeconfig=str(ADMIN_KUBECONFIG))
    )

    assert result.state == "success", result.task_states
    name = result.xcom("start", key="job_name")
    assert result.xcom("scale") == {
        "name": name,
        "namespace": namespace,
        "kind": "PyTorchJob",
        "previous_replicas": 2,
        "replicas": 3,
    }
    suspended = result.xcom("suspend")
    assert suspended["name"] == name
    resumed = result.xcom("resume")
    assert resumed["name"] == name
    assert result.xcom("delete") is True
    # The job is gone, and with it (owner references, garbage collector) its pods.
    assert jobs.get("pytorchjobs", namespace, name) is None
    jobs.wait_for(lambda: not jobs.pods(namespace, name), timeout=60, what="pods of the deleted job to go")


def test_scale_beyond_the_elastic_range_fails_before_patching(namespace, run_dag, jobs):
    dag_id = unique_dag_id("scale_bad")
    source = MANAGE_DAG.format(dag_id=dag_id, annotations=LONG_RUNNING, admin_kubeconfig=str(ADMIN_KUBECONFIG)).replace(
        "replicas=3", "replicas=9"
    )
    result = run_dag(dag_id, source)

    assert result.task_state("scale") == "failed"
    assert result.task_state("suspend") == "upstream_failed"
    name = result.xcom("start", key="job_name")
    live = jobs.get("pytorchjobs", namespace, name)
    assert live["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2


SENSOR_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    start = PyTorchJobOperator(
        task_id="start", image="busybox:1.36", command=["python", "train.py"], num_workers=1,
        restart_policy="Never", annotations={annotations!r}, wait_for_completion=False,
    )
    wait = TrainingJobSensor(
        task_id="wait",
        job_name="{{{{ ti.xcom_pull(task_ids='start', key='job_name') }}}}",
        deferrable={deferrable}, poke_interval=1, timeout=120,
    )
    start >> wait

pipeline()
"""


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "poke"])
def test_sensor_waits_for_a_job_to_succeed(namespace, run_dag, deferrable):
    dag_id = unique_dag_id("sensor")
    result = run_dag(dag_id, SENSOR_DAG.format(dag_id=dag_id, annotations={}, deferrable=deferrable))

    assert result.state == "success", result.task_states
    summary = result.xcom("wait")
    assert summary["state"] == "succeeded"
    assert summary["name"] == result.xcom("start", key="job_name")


def test_sensor_fails_with_the_reason_when_the_job_fails(namespace, run_dag, capfd):
    dag_id = unique_dag_id("sensor_fail")
    source = SENSOR_DAG.format(dag_id=dag_id, annotations={"disttrain.test/exit-code": "1"}, deferrable=True)
    result = run_dag(dag_id, source)

    assert result.task_state("wait") == "failed"
    output = "".join(capfd.readouterr())
    assert "JobFailedError" in output
    assert "Error, exit code 1" in output
