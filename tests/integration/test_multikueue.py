"""MultiKueue on the local two-cluster environment: the task follows its job to the worker cluster.

``make integration-test`` starts the worker cluster beside the local one (``DEVCLUSTER_WORKER=1``,
dev/cluster/README.md "Two clusters"): Kueue on the manager dispatches every Workload of the ClusterQueue
``multikueue`` to the worker ``disttrain-worker``, whose kwok nodes run the pods; the manager's job only
mirrors the worker's status. Each test gets the LocalQueue ``multikueue`` in its namespace on both
clusters, and on the worker a service account holding the provider's documented Role, which the Airflow
connection the operator's ``worker_clusters`` names uses. Through the public operator and the real
runtime (``dag.test()``), sync and deferred: the result names the worker cluster and carries the
leader's metrics (its termination message on the worker), the task log has the leader's lines, a
failure is explained from the worker's pods, a timeout deletes the job on the manager and Kueue's copy
on the worker is gone too, and a retry takes over the job its first try left running on the worker.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.conftest import MULTIKUEUE_CONN_ID as CONN_ID
from tests.integration.conftest import MULTIKUEUE_QUEUE as QUEUE
from tests.integration.conftest import WORKER_CLUSTER as WORKER
from tests.integration.conftest import unique_dag_id

METRICS = {"accuracy": 0.93, "loss": 0.125}

DAG = """
import datetime

import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    PyTorchJobOperator(
        task_id="train",
        image="busybox:1.36",
        command=["python", "train.py"],
        num_workers=1,
        gpus_per_replica=1,
        restart_policy="Never",
        local_queue={queue!r},
        worker_clusters={{{worker!r}: {conn_id!r}}},
        annotations={annotations!r},
        deferrable={deferrable!r},
        wait_policy=WaitPolicy(poll_interval=1),
        execution_timeout={timeout},
    )


pipeline()
"""


def _run(run_dag: Any, prefix: str, *, annotations: dict[str, str], deferrable: bool, timeout: int | None) -> Any:
    """Run the DAG; ``timeout``: the task's execution_timeout in seconds."""
    dag_id = unique_dag_id(prefix)
    source = DAG.format(
        dag_id=dag_id,
        queue=QUEUE,
        worker=WORKER,
        conn_id=CONN_ID,
        annotations=annotations,
        deferrable=deferrable,
        timeout=None if timeout is None else f"datetime.timedelta(seconds={timeout})",
    )
    return run_dag(dag_id, source)


def _jobs(api: Any, namespace: str) -> list[dict[str, Any]]:
    from kubernetes import client

    listed = client.CustomObjectsApi(api).list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")
    return listed["items"]


MODES = pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])


@MODES
def test_a_dispatched_job_is_followed_to_the_worker_cluster_where_it_ran(
    multikueue: str, run_dag: Any, admin_api: Any, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    annotations = {"disttrain.test/run-seconds": "4", "disttrain.test/termination-message": json.dumps(METRICS)}
    result = _run(run_dag, "multikueue", annotations=annotations, deferrable=deferrable, timeout=None)

    output = "".join(capfd.readouterr())
    assert result.task_state("train") == "success", output[-4000:]
    value = result.xcom("train")
    assert value["state"] == "succeeded"
    assert value["cluster"] == WORKER
    # The leader's termination message exists only on the worker (its pods never ran on the manager).
    assert value["metrics"] == METRICS
    assert value["usage"]["gpus"] == 2 and value["usage"]["gpu_seconds"] > 0
    # The leader's log lines (kwok's simulated log, served by the worker's fake kubelet) reached the task log.
    assert "epoch 3 loss=0.125" in output
    from kubernetes import client

    manager_pods = client.CoreV1Api(admin_api).list_namespaced_pod(multikueue).items
    assert manager_pods == [], "the job's pods must run on the worker only"


@MODES
def test_a_failure_on_the_worker_is_explained_from_the_worker_pods(
    multikueue: str, run_dag: Any, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    annotations = {"disttrain.test/run-seconds": "2", "disttrain.test/exit-code": "3"}
    result = _run(run_dag, "multikueue_fail", annotations=annotations, deferrable=deferrable, timeout=None)

    output = "".join(capfd.readouterr())
    assert result.task_state("train") == "failed", output[-4000:]
    failure = result.xcom("train", key="failure")
    assert failure["class"] == "training", failure
    assert "master-0: container pytorch Error, exit code 3" in failure["evidence"], failure
    assert WORKER in output


def test_a_timeout_deletes_the_job_on_the_manager_and_kueue_removes_the_workers_copy(
    multikueue: str, run_dag: Any, admin_api: Any, worker_api: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    # Deferred: the trigger's deadline ends the wait, and the task's ending deletes the job on the manager
    # and then looks for the worker's copy until Kueue has removed it.
    annotations = {"disttrain.test/run-seconds": "600"}
    result = _run(run_dag, "multikueue_timeout", annotations=annotations, deferrable=True, timeout=25)

    output = "".join(capfd.readouterr())
    assert result.task_state("train") == "failed", output[-4000:]
    assert _jobs(admin_api, multikueue) == []
    assert _jobs(worker_api, multikueue) == [], "Kueue must remove the worker's copy of a deleted job"


# Try 1 follows its job until Kueue has dispatched it and it runs on the worker, then its Airflow worker
# "dies" (an exception: no on_kill, the job stays). The job's pods request a GPU, as every real training
# job's do: Kueue assigns a ClusterQueue flavor only to the resources a job requests, and puts a check that
# applies per flavor (MultiKueue's, docs/guides/kueue.md "Limits today") only on a Workload assigned one, so
# a job requesting nothing would be admitted on the manager and never dispatched. If the job is not running
# on the worker in time, try 1 fails for good (no retry) naming its Workload's state; try 2's
# execution_timeout bounds its wait, so the test cannot hang.
DYING_FIRST_TRY_DAG = """
import time
from datetime import timedelta

import pendulum
from airflow.sdk import dag
from airflow.sdk.exceptions import AirflowFailException
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kueue.dispatch import dispatched_to
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy

DISPATCH_DEADLINE = 120


class WorkerDiesWhileTheJobRunsOnTheWorker(PyTorchJobOperator):
    \"\"\"Try 1 submits its job, sees it dispatched and running, then its Airflow worker "dies".\"\"\"

    def build_job_manifest(self, context, default_namespace):
        self._try_number = context["ti"].try_number
        return super().build_job_manifest(context, default_namespace)

    def _wait(self, hook, ref, *arguments):
        if self._try_number > 1:
            return super()._wait(hook, ref, *arguments)
        deadline = time.monotonic() + DISPATCH_DEADLINE
        while time.monotonic() < deadline:
            workload = hook.find_workload(ref.namespace, ref.uid)
            cluster = dispatched_to(workload)
            job = hook.get_job(self.kind, ref.name, ref.namespace)
            if cluster and job is not None and JobView.of(job).state is JobState.RUNNING:
                raise RuntimeError(f"worker lost while {{ref.name}} runs on {{cluster}}")
            time.sleep(0.5)
        status = (workload or {{}}).get("status")
        raise AirflowFailException(
            f"{{ref.name}} was not running on a worker cluster within {{DISPATCH_DEADLINE}} s; its Workload: {{status}}"
        )


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    WorkerDiesWhileTheJobRunsOnTheWorker(
        task_id="train",
        image="busybox:1.36",
        command=["python", "train.py"],
        num_workers=1,
        gpus_per_replica=1,
        restart_policy="Never",
        local_queue={queue!r},
        worker_clusters={{{worker!r}: {conn_id!r}}},
        annotations={annotations!r},
        wait_policy=WaitPolicy(poll_interval=1),
        execution_timeout=timedelta(seconds=180),
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


pipeline()
"""


def test_a_retry_reattaches_to_the_dispatched_job_and_follows_it_on_the_worker(
    multikueue: str, run_dag: Any, admin_api: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dag_id = unique_dag_id("multikueue_retry")
    annotations = {"disttrain.test/run-seconds": "15", "disttrain.test/termination-message": json.dumps(METRICS)}
    source = DYING_FIRST_TRY_DAG.format(
        dag_id=dag_id, queue=QUEUE, worker=WORKER, conn_id=CONN_ID, annotations=annotations
    )
    result = run_dag(dag_id, source)

    output = "".join(capfd.readouterr())
    assert result.task_state("train") == "success", output[-4000:]
    created = _jobs(admin_api, multikueue)
    # Try 1 died while the job ran on the worker; one job, the first try's, dispatched once: the second try
    # took it over on the manager and followed its pods on the worker again.
    assert f"runs on {WORKER}" in output, output[-4000:]
    assert len(created) == 1, [job["metadata"]["name"] for job in created]
    assert created[0]["metadata"]["labels"]["disttrain.airflow.apache.org/try-number"] == "1"
    assert "Reattached to" in output, output[-4000:]
    value = result.xcom("train")
    assert value["uid"] == created[0]["metadata"]["uid"]
    assert (value["state"], value["cluster"], value["metrics"]) == ("succeeded", WORKER, METRICS)
