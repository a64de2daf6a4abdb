"""The API server restarts while a task is deferred: the trigger loses its watch, keeps trying, picks
the job up again when the server is back, and the task ends with the job's real outcome.

Through the real runtime (``dag.test()``) for a job that succeeds. A job that fails across a restart
is the same path until the event: ``test_trigger_faults.py``'s twenty triggers across a restart include
two failing jobs, whose triggers fire ``failed``; the task's ending of a failed event does not depend on
how the watch got it (tests/integration/test_failure_classes.py). Each restart costs 30-40 s of a
serial pass, so the failing case is not run here a second time (issue 26, "each test earns its minutes").
"""

from __future__ import annotations

import threading

import pytest

from airflow_provider_disttrain.parameters import WaitPolicy
from airflow_provider_disttrain.utils import telemetry
from tests.integration.conftest import cluster_script, training_dag, unique_dag_id

# Restarts the API server that every test uses: run alone, after the parallel pass (Makefile integration-test).
pytestmark = pytest.mark.serial


def test_trigger_survives_an_api_server_restart(namespace, run_dag, jobs):
    annotations, task_state = {"disttrain.test/run-seconds": "25"}, "success"
    dag_id = unique_dag_id("restart")
    job_name = f"restart-{dag_id[-6:]}"
    restarted = threading.Event()
    errors: list[BaseException] = []

    def restart_when_deferred() -> None:
        try:
            # Wait until the job runs and the deferred task's trigger (dag.test runs it in this process)
            # has seen it and waits for it, then bounce the API server.
            jobs.wait_for(lambda: len(jobs.pods(namespace, job_name)) == 2, timeout=60, what="running pods")
            jobs.wait_for(lambda: len(telemetry.census) > 0, timeout=60, what="the trigger to see the job")
            cluster_script("restart.sh", "kube-apiserver")
            restarted.set()
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    bouncer = threading.Thread(target=restart_when_deferred, daemon=True)
    bouncer.start()
    source = training_dag(
        dag_id,
        job_name=job_name,
        restart_policy="Never",
        annotations=annotations,
        deferrable=True,
        wait_policy=WaitPolicy(poll_interval=2),
    )
    result = run_dag(dag_id, source)
    bouncer.join(timeout=120)

    assert not errors, errors
    assert restarted.is_set(), "the API server was not restarted while the task was deferred"
    assert result.task_state("train") == task_state
