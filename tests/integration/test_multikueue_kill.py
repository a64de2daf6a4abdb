"""MultiKueue on the local two-cluster environment: a task killed while its job runs on the worker cluster
leaves no job on either cluster.

The job is submitted to the manager and dispatched by Kueue to the worker ``disttrain-worker`` (see
test_multikueue.py for the environment). Killing the task deletes the job on the manager; Kueue then
removes its copy on the worker, and the task's log says whether it saw the copy gone. Sync: through the
public operator and the real runtime (``dag.test()``), killed as Airflow's supervisor kills a task (SIGTERM
to the task process, whose handler calls the operator's ``on_kill``). Deferred: what the triggerer calls when
a user marks a deferred task failed (the trigger's ``on_kill``), as test_kill_and_timeouts.py does.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import threading
from datetime import timedelta
from typing import Any

import pytest

from tests.integration.conftest import MULTIKUEUE_CONN_ID as CONN_ID
from tests.integration.conftest import MULTIKUEUE_QUEUE as QUEUE
from tests.integration.conftest import WORKER_CLUSTER as WORKER
from tests.integration.conftest import kueue_condition, training_dag, unique_dag_id, wait_until

LONG_RUNNING = {"disttrain.test/run-seconds": "600"}


def _jobs(api: Any, namespace: str) -> list[dict[str, Any]]:
    from kubernetes import client

    listed = client.CustomObjectsApi(api).list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")
    return listed["items"]


def _running_on_the_worker(admin_api: Any, worker_api: Any, namespace: str) -> bool:
    """Whether the job's copy on the worker runs (the training operator says so there) and the manager's
    Workload names the worker (``status.clusterName``): the kill reads where the job runs from there.

    MultiKueue records the dispatch on the manager's Workload a moment after the worker admitted the copy
    (under load, a patch that conflicted and was retried: the copy ran first). A kill in that moment
    deletes the job on the manager, and Kueue still removes the copy, but the task cannot know where to
    look for it and does not say it is gone (docs/guides/kueue.md, "Limits today")."""
    from kubernetes import client

    workloads = client.CustomObjectsApi(admin_api).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", namespace, "workloads"
    )["items"]
    recorded = any((workload.get("status") or {}).get("clusterName") == WORKER for workload in workloads)
    running = any(kueue_condition(job, "Running").get("status") == "True" for job in _jobs(worker_api, namespace))
    return recorded and running


def _no_jobs_left(admin_api: Any, worker_api: Any, namespace: str) -> None:
    """No job on the manager, and (Kueue removes it, on its own time) none on the worker."""
    wait_until("the job's deletion on the manager", lambda: _jobs(admin_api, namespace) == [], timeout=60)
    wait_until("Kueue's removal of the worker's copy", lambda: _jobs(worker_api, namespace) == [], timeout=120)


class Killer(threading.Thread):
    """Once the job's copy runs on the worker, kills the task as Airflow's supervisor does: SIGTERM to the
    task process (here this one: ``dag.test()`` runs the task in it, its runner's handler calls ``on_kill``)."""

    def __init__(self, admin_api: Any, worker_api: Any, namespace: str) -> None:
        super().__init__(daemon=True)
        self.admin_api, self.worker_api, self.namespace = admin_api, worker_api, namespace
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            running = functools.partial(_running_on_the_worker, self.admin_api, self.worker_api, self.namespace)
            wait_until("the job to run on the worker", running, 120)
            # The task runner's handler, installed before execute submitted the job: never the default,
            # which would end pytest itself.
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)
            os.kill(os.getpid(), signal.SIGTERM)
        except BaseException as error:  # said by the test, from the main thread
            self.error = error


def test_killing_a_sync_task_leaves_no_job_on_either_cluster(
    multikueue: str, run_dag: Any, admin_api: Any, worker_api: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dag_id = unique_dag_id("multikueue_kill")
    job_name = f"killed-{dag_id[-6:]}"
    source = training_dag(
        dag_id,
        job_name=job_name,
        gpus_per_replica=1,
        restart_policy="Never",
        local_queue=QUEUE,
        worker_clusters={WORKER: CONN_ID},
        annotations=LONG_RUNNING,
        # A bound should the kill never come: the test then fails on what the log does not say.
        execution_timeout=timedelta(seconds=150),
    )
    killer = Killer(admin_api, worker_api, multikueue)
    killer.start()
    result = run_dag(dag_id, source)
    killer.join(timeout=10)

    output = "".join(capfd.readouterr())
    assert killer.error is None, f"{killer.error!r}\n{output[-4000:]}"
    assert result.task_state("train") == "failed", output[-4000:]
    title = f"PyTorchJob {multikueue}/{job_name}"
    assert f"Task killed: deleting {title}" in output, output[-4000:]
    assert f"{title} was deleted. Its copy on worker cluster '{WORKER}' is gone too." in output, output[-4000:]
    _no_jobs_left(admin_api, worker_api, multikueue)


def test_killing_a_deferred_task_leaves_no_job_on_either_cluster(
    multikueue: str,
    admin_api: Any,
    worker_api: Any,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """What the triggerer calls when a user marks a deferred task failed (Airflow 3.3 ``on_kill``)."""
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.job.kinds import get_job_kind
    from airflow_provider_disttrain.kueue.dispatch import WorkerClusters
    from airflow_provider_disttrain.kueue.hold import QUEUE_NAME_LABEL
    from airflow_provider_disttrain.manifest.builder import JobParameters, build_manifest, set_identity
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    hook = TrainingJobHook()  # kubernetes_default: the service account on the manager, in this test's namespace
    kind, name = get_job_kind("PyTorchJob"), "killed-deferred"
    parameters = JobParameters(
        image="busybox:1.36", gpus_per_replica=1, restart_policy="Never", annotations=LONG_RUNNING
    )
    manifest = set_identity(build_manifest(kind, None, parameters), name, multikueue, {QUEUE_NAME_LABEL: QUEUE})
    job = hook.create_job(kind, manifest, multikueue)
    running = functools.partial(_running_on_the_worker, admin_api, worker_api, multikueue)
    wait_until("the job to run on the worker", running, timeout=120)
    trigger = TrainingJobTrigger(
        kind="PyTorchJob",
        name=name,
        namespace=multikueue,
        uid=job["metadata"]["uid"],
        connection=hook.trigger_connection(),
        worker_clusters=WorkerClusters({WORKER: CONN_ID}).to_dict(),
    )

    with caplog.at_level("INFO"):
        asyncio.run(trigger.on_kill())

    output = caplog.text + "".join(capfd.readouterr())
    title = f"PyTorchJob {multikueue}/{name}"
    assert f"{title} was deleted. Its copy on worker cluster '{WORKER}' is gone too." in output, output[-4000:]
    _no_jobs_left(admin_api, worker_api, multikueue)
