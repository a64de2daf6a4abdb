"""Preemption on the real Kueue: a high-priority job takes the GPUs of a running low-priority one.

The low job is evicted (Kueue's ``Evicted=True``, reason ``Preempted``), suspended and queued again; the
task says so in its log, waits (eviction is not a failure, and ``startup_timeout`` does not apply to a
job that has run), and succeeds once Kueue admits the job again. Both results record what Kueue did.

The sync and the deferrable pair run at once, each in a ClusterQueue of its own (4 nvidia.com/gpu,
``withinClusterQueue: LowerPriority``), so they neither wait for nor preempt each other or the other tests'
jobs; both queues' flavor puts their pods on a kwok node of the test's own (8 GPUs, conftest's
``gpu_pool``), so an admitted job never waits for GPUs other tests' jobs hold on the shared nodes. Two
WorkloadPriorityClasses of the test's own set the priorities. The four DAG runs are real ``dag.test()`` runs in
processes of their own (one process runs one task at a time), as in ``test_kueue.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import KUEUE, gpu_pool, own_queue, unique_dag_id
from tests.integration.test_kueue import _airflow_home, _workloads

PRIORITIES = {"low": 100, "high": 10_000}
LOW_RUN_SECONDS = 90  # long enough to be preempted while it runs, even when a DAG run takes long to start
HIGH_RUN_SECONDS = 5
STARTUP_TIMEOUT = 20  # shorter than the low job's whole wait for re-admission: it must not apply again

DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy

@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    PyTorchJobOperator(
        task_id="train",
        job_name={job_name!r},
        image="busybox:1.36",
        command=["python", "train.py"],
        num_workers=1,
        gpus_per_replica=2,
        local_queue={local_queue!r},
        labels={{"kueue.x-k8s.io/priority-class": {priority!r}}},
        annotations={{"disttrain.test/run-seconds": "{seconds}"}},
        deferrable={deferrable!r},
        wait_policy=WaitPolicy(poll_interval=1, startup_timeout={startup_timeout}),
    )

pipeline()
"""
RUNNER = textwrap.dedent(
    """
    import json, sys
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    bag = DagBag(sys.argv[1])
    assert not bag.import_errors, bag.import_errors
    sys.stdin.readline()  # Airflow imported and the DAG parsed (tens of seconds on a busy machine): go
    run = bag.get_dag(sys.argv[2]).test()
    print("DAG RUN STATE:", run.state)
    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id="train")
        row = rows.filter_by(key="return_value").first()
        print("RESULT:", json.dumps(XComModel.deserialize_value(row) if row else None))
    """
)


MODES = {"sync": False, "deferrable": True}


@pytest.fixture
def priority_classes(admin_api: Any, namespace: str) -> Iterator[dict[str, str]]:
    """The WorkloadPriorityClass name per level, named after the namespace (cluster-wide objects: tests
    running at once must not share or delete each other's); deleted after the test."""
    from kubernetes import client

    custom = client.CustomObjectsApi(admin_api)
    names = {level: f"{namespace}-{level}" for level in PRIORITIES}
    with contextlib.ExitStack() as cleanup:
        for level, name in names.items():
            body = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": PRIORITIES[level],
            }
            custom.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", body)
            cleanup.callback(custom.delete_cluster_custom_object, *KUEUE, "workloadpriorityclasses", name)
        yield names


@pytest.fixture
def preemptible_queues(admin_api: Any, namespace: str) -> Iterator[dict[str, str]]:
    """Per mode, a LocalQueue on a ClusterQueue of its own: the sync and the deferrable pairs run at once
    (a third of the time of running them one after the other) without preempting each other. Both on one
    kwok node of 8 GPUs of the test's own: the two queues' quotas together."""
    from kubernetes import client

    custom = client.CustomObjectsApi(admin_api)
    queues = {mode: f"preemptible-{mode}" for mode in MODES}
    preemption = {"withinClusterQueue": "LowerPriority"}
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(gpu_pool(admin_api, namespace, gpus_per_node=4 * len(MODES)))
        for queue in queues.values():
            stack.enter_context(own_queue(custom, namespace, queue, gpus=4, flavor=pool.flavor, preemption=preemption))
        yield queues


def _start(tmp_path: Path, name: str, deferrable: bool, **fields: Any) -> subprocess.Popen[str]:
    database = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    dag_id = unique_dag_id(f"preempt_{name}")
    env = _airflow_home(tmp_path, name, database)
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{dag_id}.py"
    dag_file.write_text(DAG.format(dag_id=dag_id, deferrable=deferrable, startup_timeout=STARTUP_TIMEOUT, **fields))
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(dag_file), dag_id],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _go(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.write("go\n")
    process.stdin.flush()  # communicate() closes it


def _result(output: str) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if line.startswith("RESULT: "))
    return json.loads(line.removeprefix("RESULT: "))


def test_a_high_priority_job_preempts_a_running_low_one_which_is_readmitted_and_both_succeed(
    namespace, airflow_db, jobs, tmp_path, preemptible_queues, priority_classes
):
    low_names = {mode: f"low-{mode[:4]}-{secrets.token_hex(3)}" for mode in MODES}
    processes: dict[str, subprocess.Popen[str]] = {}
    try:
        # Four DAG runs, started at once: each waits for a line on its stdin once its DAG is parsed, so
        # the high-priority jobs can be submitted the moment the low ones run, however slow the start.
        for mode, deferrable in MODES.items():
            for level, seconds in (("low", LOW_RUN_SECONDS), ("high", HIGH_RUN_SECONDS)):
                processes[f"{level}-{mode}"] = _start(
                    tmp_path,
                    f"{level}-{mode}",
                    deferrable,
                    job_name=low_names[mode] if level == "low" else f"high-{mode[:4]}-{secrets.token_hex(3)}",
                    priority=priority_classes[level],
                    seconds=seconds,
                    local_queue=preemptible_queues[mode],
                )
        for mode in MODES:
            _go(processes[f"low-{mode}"])
        # Each low job holds all 4 GPUs of its ClusterQueue and runs: then its high one is submitted.
        for mode in MODES:
            jobs.wait_for(
                lambda mode=mode: any(pod.status.phase == "Running" for pod in jobs.pods(namespace, low_names[mode])),
                timeout=180,
                what=f"the {mode} low-priority job's pods running",
            )
            _go(processes[f"high-{mode}"])
        outputs = {name: process.communicate(timeout=600)[0] for name, process in processes.items()}
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()

    for mode in MODES:
        low_output, high_output = outputs[f"low-{mode}"], outputs[f"high-{mode}"]
        assert "DAG RUN STATE: success" in high_output, (mode, high_output[-4000:])
        assert "DAG RUN STATE: success" in low_output, (mode, low_output[-4000:])
        low_result, high_result = _result(low_output), _result(high_output)
        # The low job's log said it was preempted, by which job, and that it waits to be admitted again.
        said = [line for line in low_output.splitlines() if "Kueue" in line]
        submitted = [
            line[:160] for line in high_output.splitlines() if "Submitted" in line or "created" in line.lower()
        ]
        assert "evicted by Kueue" in low_output and "(Preempted)" in low_output, (mode, said, submitted)
        assert f"by the job of uid {high_result['uid']}" in low_output, (mode, said)
        assert "waits to be admitted again" in low_output, (mode, said)
        # The results record it: the low job was evicted once by preemption, ran twice; the high one never.
        assert low_result["state"] == "succeeded" and high_result["state"] == "succeeded"
        assert low_result["kueue"]["evictions"] == 1, (mode, low_result, said)
        assert low_result["kueue"]["evictions_by_reason"] == {"Preempted": 1}
        assert low_result["kueue"]["priority_class"] == priority_classes["low"]
        # Admitted for its first run (until preempted) and its whole second run.
        assert low_result["kueue"]["running_seconds"] >= LOW_RUN_SECONDS
        assert low_result["kueue"]["queued_seconds"] >= HIGH_RUN_SECONDS  # waited while the high job ran
        assert high_result["kueue"]["evictions"] == 0
        assert "Kueue: queued" in low_output and "evicted 1 time(s) (Preempted x1)" in low_output
    # Kueue's own account agrees, where the Workloads are still there.
    for workload in _workloads(jobs, namespace):
        if workload["metadata"]["name"].startswith("pytorchjob-low-"):
            stats = workload["status"]["schedulingStats"]["evictions"]
            assert [(e["reason"], e["count"]) for e in stats] == [("Preempted", 1)]
