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
from airflow_provider_disttrain.parameters import MPIOptions, WaitPolicy
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
        mpi_options=MPIOptions(slots_per_worker=1),
        deferrable={deferrable},
        wait_policy=WaitPolicy(poll_interval=1, startup_timeout=900),
    )

pipeline()
"""

BUILT_LEADER_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import MPIOptions, WaitPolicy
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


MPI_LAUNCHER = ["mpirun", "-n", "2", "/home/mpiuser/pi"]
XGBOOST = (
    'kind="XGBoostJob", image="docker.io/kubeflow/xgboost-dist-iris:latest", '
    'args=["--job_type=Train", "--model_path=/tmp/model"],'
)


@pytest.mark.parametrize(
    ("operator", "arguments", "specs_key", "leader", "plural", "version", "worker_pod"),
    [
        (
            "mpi_job.MPIJobOperator",
            f"image={MPI_IMAGE!r}, command={MPI_LAUNCHER!r}, mpi_options=MPIOptions(slots_per_worker=2),",
            "mpiReplicaSpecs",
            "Launcher",
            "mpijobs",
            "v2beta1",
            {"containers": [SSH_WORKER]},  # the launcher's command is not the workers'
        ),
        ("training_job.TrainingJobOperator", XGBOOST, "xgbReplicaSpecs", "Master", "xgboostjobs", "v1", {}),
    ],
    ids=["mpi-operator", "training-operator-xgboost"],
)
def test_a_manifest_of_workers_only_runs_with_the_leader_built_from_the_parameters(
    namespace: str,
    run_dag: Any,
    jobs: Any,
    operator: str,
    arguments: str,
    specs_key: str,
    leader: str,
    plural: str,
    version: str,
    worker_pod: dict[str, Any],
) -> None:
    # Without the leader the mpi-operator would refuse the MPIJob by event, the training-operator's
    # webhook the XGBoostJob with a 403 ("spec.xgbReplicaSpecs[Master]: Required value: must be present").
    dag_id = unique_dag_id("workersonly")
    module, name = operator.split(".")
    template = {"metadata": {"annotations": {"team": "vision"}}, "spec": worker_pod}
    manifest = workers_only(specs_key, 1, template)
    source = BUILT_LEADER_DAG.format(
        dag_id=dag_id, module=module, operator=name, manifest=manifest, arguments=arguments
    )

    result = run_dag(dag_id, source)

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert summary["replica_statuses"][leader]["succeeded"] == 1
    specs = jobs.get(plural, namespace, summary["name"], version=version)["spec"][specs_key]
    assert specs["Worker"]["template"]["metadata"]["annotations"]["team"] == "vision"
    assert specs[leader]["replicas"] == 1
