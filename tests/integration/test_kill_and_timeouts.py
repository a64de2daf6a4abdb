"""No orphaned GPU jobs: a task that times out, or is killed, takes its job with it, in both modes."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import pytest

from airflow_provider_disttrain.parameters import CleanupPolicy
from tests.integration.conftest import SYNC_TIMEOUT, training_dag, unique_dag_id

LONG_RUNNING = {"disttrain.test/run-seconds": "600"}


@pytest.mark.parametrize(
    ("deferrable", "execution_timeout", "error"),
    # Deferred, the trigger reports the timeout 15 s before the scheduler would, so the task can clean up.
    [(False, 8, SYNC_TIMEOUT), (True, 22, "JobTimeoutError")],
    ids=["sync", "deferrable"],
)
def test_execution_timeout_deletes_the_job(namespace, run_dag, jobs, capfd, deferrable, execution_timeout, error):
    dag_id = unique_dag_id("exec_timeout")
    job_name = f"timeout-{dag_id[-6:]}"
    source = training_dag(
        dag_id,
        job_name=job_name,
        annotations=LONG_RUNNING,
        deferrable=deferrable,
        execution_timeout=timedelta(seconds=execution_timeout),
    )
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "failed"
    assert re.search(error, "".join(capfd.readouterr()))
    jobs.wait_for(lambda: jobs.get("pytorchjobs", namespace, job_name) is None, timeout=30, what="job deletion")


def test_execution_timeout_keeps_the_job_when_asked(namespace, run_dag, jobs, capfd):
    dag_id = unique_dag_id("exec_timeout_keep")
    job_name = f"keep-{dag_id[-6:]}"
    source = training_dag(
        dag_id,
        job_name=job_name,
        annotations=LONG_RUNNING,
        # Long enough for the submission on a loaded machine (a CI run timed out before its create once).
        execution_timeout=timedelta(seconds=15),
        cleanup_policy=CleanupPolicy(on_timeout=False),
    )
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "failed"
    output = "".join(capfd.readouterr())
    assert f"Submitted PyTorchJob {namespace}/{job_name}" in output
    assert re.search(SYNC_TIMEOUT, output)
    assert jobs.get("pytorchjobs", namespace, job_name) is not None


def test_killing_a_deferred_task_deletes_its_job(namespace, jobs, service_account_kubeconfig):
    """What the triggerer calls when a user marks a deferred task failed (Airflow 3.3 ``on_kill``)."""
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.job.kinds import get_job_kind
    from airflow_provider_disttrain.manifest.builder import JobParameters, build_manifest, set_identity
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    hook = TrainingJobHook()  # kubernetes_default: the service account, in this test's namespace
    kind = get_job_kind("PyTorchJob")
    manifest = build_manifest(
        kind, None, JobParameters(image="busybox:1.36", annotations={"disttrain.test/run-seconds": "600"})
    )
    job = hook.create_job(kind, set_identity(manifest, "killed-job", namespace, {}), namespace)
    trigger = TrainingJobTrigger(
        kind="PyTorchJob",
        name="killed-job",
        namespace=namespace,
        uid=job["metadata"]["uid"],
        connection=hook.trigger_connection(),
    )

    asyncio.run(trigger.on_kill())

    jobs.wait_for(lambda: jobs.get("pytorchjobs", namespace, "killed-job") is None, timeout=30, what="deletion")
