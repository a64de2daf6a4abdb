"""Airflow 3.4: the platform taking a training's pods away reschedules the task without using a retry.

Through the public operator, ``DisttrainRetryPolicy`` and the real runtime (``dag.test()``, which runs a task
that is ``up_for_reschedule`` again once its reschedule date passes): the job goes through the real Kueue
(the namespace's LocalQueue admits it) and its pods run on a kwok node, where the first run's pods end as
the kube-scheduler leaves a pod it preempted for a higher-priority one: ``DisruptionTarget=True``, reason
``PreemptionByScheduler``, killed with exit code 137 (the ``disttrain.test/disruption`` annotation,
dev/cluster/README.md "Simulated pods"; the annotations are templated on ``task_reschedule_count``, so only
the first run's job is preempted). The training-operator fails the job (``restartPolicy: Never``); the
provider classes the failure as the infrastructure's (a disruption); the policy answers RESCHEDULE: the task
runs again under the same try, submits a fresh job and succeeds, its retry unused. Past ``max_reschedules``
Airflow's own retry logic applies again, with the reason.

A Kueue preemption itself (Kueue suspends and requeues the job) never fails the task, so it reschedules
nothing and uses no retry (tests/integration/test_kueue_preemption.py).

Runs in ``make newest-airflow-integration-test`` (marker ``airflow_next``), with .venv-airflow-next's Airflow.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import LOCAL_QUEUE, unique_dag_id

pytestmark = pytest.mark.airflow_next

DAG = """
import datetime

import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.failures.retry_policy import DisttrainRetryPolicy
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    PyTorchJobOperator(
        task_id="train",
        image="busybox:1.36",
        command=["python", "train.py"],
        num_workers=1,
        restart_policy="Never",
        local_queue={local_queue!r},
        deferrable={deferrable!r},
        annotations={annotations!r},
        wait_policy=WaitPolicy(poll_interval=1),
        retries={retries},
        retry_delay=datetime.timedelta(seconds=1),
        retry_policy=DisttrainRetryPolicy(
            infrastructure_delay=datetime.timedelta(seconds=1), max_reschedules={max_reschedules}
        ),
    )


pipeline()
"""

PREEMPTED = "PreemptionByScheduler"


def preempted_while(condition: str) -> dict[str, str]:
    """Pod annotations (templated) that end the pods preempted while ``condition`` holds, else succeed."""
    return {
        "disttrain.test/disruption": f"{{% if {condition} %}}{PREEMPTED}{{% endif %}}",
        "disttrain.test/exit-code": f"{{% if {condition} %}}137{{% endif %}}",
        "disttrain.test/run-seconds": "1",
    }


def run(run_dag: Any, prefix: str, *, annotations: dict[str, str], **fields: Any) -> Any:
    """Run the DAG; ``fields``: deferrable, retries, max_reschedules."""
    dag_id = unique_dag_id(prefix)
    source = DAG.format(dag_id=dag_id, local_queue=LOCAL_QUEUE, annotations=annotations, **fields)
    return run_dag(dag_id, source)


def train_instance(result: Any) -> Any:
    (ti,) = [ti for ti in result.dag_run.get_task_instances() if ti.task_id == "train"]
    return ti


def reschedules(ti: Any) -> int:
    """Airflow's own record: the rows of ``task_reschedule`` for this task instance."""
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(TaskReschedule).filter(TaskReschedule.ti_id == ti.id).count()


def pytorch_jobs(jobs: Any, namespace: str) -> dict[str, str]:
    """Each PyTorchJob in ``namespace`` by name, with its last condition's type (Succeeded, Failed...)."""
    found = {}
    for job in jobs.list("pytorchjobs", namespace):
        conditions = job.get("status", {}).get("conditions") or [{"type": "none"}]
        found[job["metadata"]["name"]] = conditions[-1]["type"]
    return found


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_preempted_training_is_rescheduled_without_using_a_retry_and_its_new_job_succeeds(
    namespace: str, run_dag: Any, jobs: Any, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    annotations = preempted_while("task_reschedule_count == 0")
    result = run(run_dag, "rescheduled", annotations=annotations, deferrable=deferrable, retries=1, max_reschedules=2)

    output = "".join(capfd.readouterr())
    assert result.task_state("train") == "success", output[-4000:]
    ti = train_instance(result)
    assert ti.try_number == 1, "the preemption must not use the task's retry"
    assert reschedules(ti) == 1
    # The first run's job failed on the preemption (kept for inspection); the second run submitted its own.
    assert sorted(pytorch_jobs(jobs, namespace).values()) == ["Failed", "Succeeded"]
    assert result.xcom("train")["state"] == "succeeded"
    # The task log says what happened, and why: the failure's class and the policy's answer.
    assert f"Failure class: infrastructure ({PREEMPTED})" in output
    assert f"the platform took the pods away ({PREEMPTED}): rescheduled without using a retry" in output
    assert "marking task as UP_FOR_RESCHEDULE" in output


def test_past_max_reschedules_the_tasks_own_retry_logic_applies_with_the_reason(
    namespace: str, run_dag: Any, jobs: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    # Every run preempted; one reschedule allowed: the second failure goes to the standard logic, which,
    # with no retries, fails the task.
    annotations = preempted_while("true")
    result = run(run_dag, "exhausted", annotations=annotations, deferrable=False, retries=0, max_reschedules=1)

    output = "".join(capfd.readouterr())
    ti = train_instance(result)
    assert result.task_state("train") == "failed", output[-4000:]
    assert (ti.try_number, reschedules(ti)) == (1, 1)
    assert sorted(pytorch_jobs(jobs, namespace).values()) == ["Failed", "Failed"]
    assert "Reschedule limit reached" in output and "max_reschedules=1" in output
