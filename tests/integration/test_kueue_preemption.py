"""Preemption on the real Kueue: a high-priority job takes the GPUs of a running low-priority one.

The low job is evicted (Kueue's ``Evicted=True``, reason ``Preempted``), suspended and queued again; the
task says so in its log, waits (eviction is not a failure, and ``startup_timeout`` does not apply to a
job that has run), and succeeds once Kueue admits the job again. Both results record what Kueue did.

Each test has a ClusterQueue of its own (8 nvidia.com/gpu, ``withinClusterQueue: LowerPriority``), so it
neither waits for nor preempts the other tests' jobs, and two WorkloadPriorityClasses. The two DAG runs
are real ``dag.test()`` runs in two processes (one process runs one task at a time), as in
``test_kueue.py``.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import unique_dag_id
from tests.integration.test_kueue import _airflow_home, _condition, _workloads

KUEUE = ("kueue.x-k8s.io", "v1beta2")
FLAVOR = "default-flavor"  # dev/cluster/controllers.sh
PRIORITIES = {"disttrain-it-low": 100, "disttrain-it-high": 10_000}
LOW_RUN_SECONDS = 45  # long enough to be preempted while it runs
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
        gpus_per_replica=4,
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
    run = bag.get_dag(sys.argv[2]).test()
    print("DAG RUN STATE:", run.state)
    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=run.dag_id, run_id=run.run_id, task_id="train")
        row = rows.filter_by(key="return_value").first()
        print("RESULT:", json.dumps(XComModel.deserialize_value(row) if row else None))
    """
)


@pytest.fixture
def preemptible_queue(admin_api: Any, namespace: str) -> Iterator[str]:
    """A LocalQueue in ``namespace`` on a ClusterQueue of 8 GPUs where priority preempts."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(admin_api)
    for name, value in PRIORITIES.items():
        try:
            custom.create_cluster_custom_object(
                *KUEUE,
                "workloadpriorityclasses",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                },
            )
        except ApiException as error:
            if error.status != 409:  # made by an earlier test: the same class
                raise
    cluster_queue = f"preempt-{secrets.token_hex(3)}"
    quota = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
    custom.create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": list(quota),
                        "flavors": [
                            {"name": FLAVOR, "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()]}
                        ],
                    }
                ],
            },
        },
    )
    local_queue = "preemptible"
    custom.create_namespaced_custom_object(
        *KUEUE,
        namespace,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": local_queue},
            "spec": {"clusterQueue": cluster_queue},
        },
    )
    deadline = time.monotonic() + 30
    while (
        _condition(custom.get_namespaced_custom_object(*KUEUE, namespace, "localqueues", local_queue), "Active").get(
            "status"
        )
        != "True"
    ):
        assert time.monotonic() < deadline, "Kueue did not make the LocalQueue Active"
        time.sleep(0.5)
    yield local_queue
    custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue)


def _start(tmp_path: Path, name: str, deferrable: bool, **fields: Any) -> tuple[subprocess.Popen[str], str]:
    database = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    dag_id = unique_dag_id(f"preempt_{name}")
    env = _airflow_home(tmp_path, name, database)
    dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{dag_id}.py"
    dag_file.write_text(DAG.format(dag_id=dag_id, deferrable=deferrable, startup_timeout=STARTUP_TIMEOUT, **fields))
    process = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(dag_file), dag_id],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return process, dag_id


def _result(output: str) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if line.startswith("RESULT: "))
    return json.loads(line.removeprefix("RESULT: "))


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_high_priority_job_preempts_a_running_low_one_which_is_readmitted_and_both_succeed(
    namespace, airflow_db, jobs, tmp_path, preemptible_queue, deferrable
):
    low_name, high_name = f"low-{secrets.token_hex(3)}", f"high-{secrets.token_hex(3)}"
    common = {"local_queue": preemptible_queue}
    low, _ = _start(
        tmp_path, "low", deferrable, job_name=low_name, priority="disttrain-it-low", seconds=LOW_RUN_SECONDS, **common
    )
    try:
        # The low job holds all 8 GPUs and runs.
        jobs.wait_for(
            lambda: any(pod.status.phase == "Running" for pod in jobs.pods(namespace, low_name)),
            timeout=120,
            what="the low-priority job's pods running",
        )
        high, _ = _start(
            tmp_path,
            "high",
            deferrable,
            job_name=high_name,
            priority="disttrain-it-high",
            seconds=HIGH_RUN_SECONDS,
            **common,
        )
        low_output, _ = low.communicate(timeout=600)
        high_output, _ = high.communicate(timeout=120)
    finally:
        for process in (low, locals().get("high")):
            if process is not None and process.poll() is None:
                process.kill()

    assert "DAG RUN STATE: success" in high_output, high_output[-4000:]
    assert "DAG RUN STATE: success" in low_output, low_output[-4000:]
    # The low job's log said it was preempted, by whom, and that it waits to be admitted again.
    low_result, high_result = _result(low_output), _result(high_output)
    assert "evicted by Kueue" in low_output and "(Preempted)" in low_output, low_output[-4000:]
    said = [line for line in low_output.splitlines() if "Kueue" in line]
    assert f"by the job of uid {high_result['uid']}" in low_output, said
    assert "waits to be admitted again" in low_output, said
    # The results record it: the low job was evicted once by preemption, ran twice; the high one never.
    assert low_result["state"] == "succeeded" and high_result["state"] == "succeeded"
    assert low_result["kueue"]["evictions"] == 1, (low_result, said)
    assert low_result["kueue"]["evictions_by_reason"] == {"Preempted": 1}
    assert low_result["kueue"]["priority_class"] == "disttrain-it-low"
    # Admitted for its first run (until preempted) and its whole second run.
    assert low_result["kueue"]["running_seconds"] >= LOW_RUN_SECONDS
    assert low_result["kueue"]["queued_seconds"] >= HIGH_RUN_SECONDS  # waited while the high job ran
    assert high_result["kueue"]["evictions"] == 0
    assert "Kueue: queued" in low_output and "evicted 1 time(s) (Preempted x1)" in low_output
    # Kueue's own account agrees, where the Workload is still there.
    for workload in _workloads(jobs, namespace):
        if workload["metadata"]["name"].startswith(f"pytorchjob-{low_name}"):
            stats = workload["status"]["schedulingStats"]["evictions"]
            assert [(e["reason"], e["count"]) for e in stats] == [("Preempted", 1)]
