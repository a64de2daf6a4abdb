"""Refusals end fast, with the refuser's words, on the local cluster's real controllers.

- An MPIJob the mpi-operator refuses (its controller validates: a Warning event ``ValidationError``, never
  a condition) fails the task within seconds with the event's message, in sync and deferred mode, instead
  of waiting out ``startup_timeout``. The provider's own validation refuses that job before sending it;
  a subclass switches it off here, standing for a rule the provider does not know (a newer mpi-operator's).
- A ``job_manifest`` that only overrides the Workers gets the leader its controller requires built from
  the parameters: an MPIJob's Launcher runs ``command`` under the real mpi-operator, an XGBoostJob's Master
  passes the real training-operator's webhook (which refuses an XGBoostJob without one) and runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import unique_dag_id

MPI_IMAGE = "mpioperator/mpi-pi:openmpi"
SSH_WORKER = {"name": "worker", "image": MPI_IMAGE, "command": ["/usr/sbin/sshd", "-De"]}

REFUSED_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import WaitPolicy
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator


class UncheckedMPIJobOperator(MPIJobOperator):
    def validate_job_manifest(self, manifest):
        pass  # the mpi-operator alone judges this job


@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    UncheckedMPIJobOperator(
        task_id="train",
        job_name="{job_name}",
        job_manifest={manifest!r},
        slots_per_worker=1,
        deferrable={deferrable},
        wait_policy=WaitPolicy(poll_interval=1, startup_timeout=900),
    )

pipeline()
"""

BUILT_LEADER_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import WaitPolicy
from airflow_provider_disttrain.operators.{module} import {operator}

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    {operator}(
        task_id="train",
        job_manifest={manifest!r},
        wait_policy=WaitPolicy(poll_interval=1, startup_timeout=120),
        {arguments}
    )

pipeline()
"""


def workers_only(specs_key: str, replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {specs_key: {"Worker": {"replicas": replicas, "template": template}}}}


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
def test_a_job_the_mpi_operator_refuses_fails_at_once_with_its_words(
    namespace: str, run_dag: Any, jobs: Any, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    dag_id = unique_dag_id("refused")
    job_name = f"refused-{dag_id[-6:]}"
    manifest = workers_only("mpiReplicaSpecs", 1, {"spec": {"containers": [SSH_WORKER]}})

    result = run_dag(
        dag_id, REFUSED_DAG.format(dag_id=dag_id, job_name=job_name, manifest=manifest, deferrable=deferrable)
    )

    assert result.task_state("train") == "failed"
    output = "".join(capfd.readouterr())
    assert (
        f"MPIJob {namespace}/{job_name} was refused by its controller and will never run: ValidationError: " in output
    )
    assert "must have Launcher replica spec" in output  # the mpi-operator's own words
    assert "did not start within startup_timeout" not in output
    live = jobs.get("mpijobs", namespace, job_name, version="v2beta1")
    assert live is None or not (live.get("status") or {}).get("conditions")  # the controller never took it


def test_an_mpijob_manifest_of_workers_only_runs_with_the_launcher_built(
    namespace: str, run_dag: Any, jobs: Any
) -> None:
    dag_id = unique_dag_id("mpiworkers")
    template = {"metadata": {"annotations": {"team": "vision"}}, "spec": {"containers": [SSH_WORKER]}}
    arguments = f'image="{MPI_IMAGE}", command=["mpirun", "-n", "2", "/home/mpiuser/pi"], slots_per_worker=2,'
    source = BUILT_LEADER_DAG.format(
        dag_id=dag_id,
        module="mpi_job",
        operator="MPIJobOperator",
        manifest=workers_only("mpiReplicaSpecs", 1, template),
        arguments=arguments,
    )

    result = run_dag(dag_id, source)

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert summary["replica_statuses"]["Launcher"]["succeeded"] == 1
    live = jobs.get("mpijobs", namespace, summary["name"], version="v2beta1")
    specs = live["spec"]["mpiReplicaSpecs"]
    assert specs["Launcher"]["template"]["spec"]["containers"][0]["command"] == [
        "mpirun",
        "-n",
        "2",
        "/home/mpiuser/pi",
    ]
    assert specs["Worker"]["template"]["metadata"]["annotations"]["team"] == "vision"


def test_an_xgboostjob_manifest_of_workers_only_passes_the_training_operators_webhook(
    namespace: str, run_dag: Any, jobs: Any
) -> None:
    dag_id = unique_dag_id("xgbworkers")
    template = {"metadata": {"annotations": {"team": "tabular"}}}
    arguments = (
        'kind="XGBoostJob", image="docker.io/kubeflow/xgboost-dist-iris:latest", '
        'args=["--job_type=Train", "--model_path=/tmp/model"],'
    )
    source = BUILT_LEADER_DAG.format(
        dag_id=dag_id,
        module="training_job",
        operator="TrainingJobOperator",
        manifest=workers_only("xgbReplicaSpecs", 2, template),
        arguments=arguments,
    )

    result = run_dag(dag_id, source)

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert summary["replica_statuses"]["Master"]["succeeded"] == 1
    live = jobs.get("xgboostjobs", namespace, summary["name"])
    assert live["spec"]["xgbReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]["team"] == "tabular"
