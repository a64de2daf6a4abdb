"""How long a job may take to start, against the real training-operator: a job suspended after it ran
is waited for past ``startup_timeout``; a ``ttlSecondsAfterFinished`` a wait could miss is refused."""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from datetime import datetime
from typing import Any

import pytest

from airflow_provider_disttrain.parameters import CleanupPolicy, RunPolicy, WaitPolicy
from tests.integration.conftest import training_dag, unique_dag_id


def _conditions(job: dict[str, Any] | None) -> dict[str, str]:
    return {c["type"]: c["status"] for c in ((job or {}).get("status") or {}).get("conditions") or []}


RUN_SECONDS = "disttrain.test/run-seconds"  # how long kwok keeps the pods Running


def suspend_while_running_then_resume(
    jobs: Any, namespace: str, name: str, startup_timeout: float, errors: list
) -> None:
    """What SuspendTrainingJobOperator (or a queue's preemption) does to a running job, from outside the task."""
    patch: dict[str, Any]
    try:
        jobs.wait_for(lambda: _conditions(jobs.get("pytorchjobs", namespace, name)).get("Running") == "True", 90)
        patch = {"spec": {"runPolicy": {"suspend": True}}}
        jobs.custom.patch_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name, patch)
        jobs.wait_for(lambda: _conditions(jobs.get("pytorchjobs", namespace, name)).get("Suspended") == "True", 60)
        # The first run was long only so that no machine ends it before the suspension; once resumed, the
        # pods may end at once (a suspended job's pod templates may change: Kueue does so).
        replicas = jobs.get("pytorchjobs", namespace, name)["spec"]["pytorchReplicaSpecs"]
        annotations = {"template": {"metadata": {"annotations": {RUN_SECONDS: "1"}}}}
        patch = {"spec": {"pytorchReplicaSpecs": dict.fromkeys(replicas, annotations)}}
        jobs.custom.patch_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name, patch)
        # Suspended until past the startup deadline (counted from the job's creation): the time is the
        # behaviour under test here, and the wait checks its deadlines when they pass.
        created = jobs.get("pytorchjobs", namespace, name)["metadata"]["creationTimestamp"]
        deadline = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() + startup_timeout
        time.sleep(max(0.0, deadline + 4 - time.time()))
        patch = {"spec": {"runPolicy": {"suspend": False}}}
        jobs.custom.patch_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name, patch)
    except Exception as error:  # reported by the test, not lost in the thread
        errors.append(error)
        # The task ends at once (the job was deleted) rather than wait for a first run of 300 s.
        with contextlib.suppress(Exception):  # (none to delete: the error above says why)
            jobs.custom.delete_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_job_suspended_after_it_ran_outlives_the_startup_timeout(namespace, run_dag, jobs, deferrable):
    dag_id = unique_dag_id("suspended")
    name = f"suspended-{secrets.token_hex(3)}"
    startup_timeout = 30  # room for a busy training-operator to start the job before the deadline
    errors: list[Exception] = []
    helper = threading.Thread(
        target=suspend_while_running_then_resume,
        args=(jobs, namespace, name, startup_timeout, errors),
        daemon=True,
    )
    helper.start()

    result = run_dag(
        dag_id,
        training_dag(
            dag_id,
            job_name=name,
            annotations={RUN_SECONDS: "300"},  # suspended long before; 1 s once resumed (the helper)
            deferrable=deferrable,
            wait_policy=WaitPolicy(startup_timeout=startup_timeout),
        ),
    )
    helper.join(timeout=120)

    assert errors == []
    assert result.task_state("train") == "success"
    summary = result.xcom("train")
    assert summary["state"] == "succeeded"
    # It really was suspended (and resumed) while the task waited; the job was never deleted.
    conditions = {c["type"]: c for c in summary["conditions"]}
    assert conditions["Suspended"]["status"] == "False"
    assert jobs.get("pytorchjobs", namespace, name)["metadata"]["uid"] == summary["uid"]


def test_a_ttl_the_wait_could_miss_is_refused_before_a_job_is_created(namespace, run_dag, jobs):
    dag_id = unique_dag_id("short_ttl")

    # Were it submitted, this job would stay Pending (9 GPUs fit no node) and be kept: nothing may be there.
    arguments = {"gpus_per_replica": 9, "cleanup_policy": CleanupPolicy(on_timeout=False)}
    result = run_dag(
        dag_id,
        training_dag(
            dag_id,
            **arguments,
            run_policy=RunPolicy(ttl_seconds_after_finished=1),
            wait_policy=WaitPolicy(poll_interval=5, startup_timeout=5),
        ),
    )

    assert result.task_state("train") == "failed"
    assert jobs.list("pytorchjobs", namespace) == []


def test_a_ttl_the_wait_can_see_past_is_kept_and_the_operator_deletes_the_job_after(namespace, run_dag, jobs):
    dag_id = unique_dag_id("ttl")

    result = run_dag(
        dag_id,
        training_dag(
            dag_id, run_policy=RunPolicy(ttl_seconds_after_finished=3), wait_policy=WaitPolicy(poll_interval=1)
        ),
    )

    assert result.task_state("train") == "success"
    assert result.xcom("train")["state"] == "succeeded"
    jobs.wait_for(lambda: jobs.list("pytorchjobs", namespace) == [], 60, "the training-operator's TTL deletion")
