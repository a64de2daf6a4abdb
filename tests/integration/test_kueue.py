"""Kueue (v0.19.2) on the local cluster: jobs submitted with ``local_queue=`` wait for quota, say why, and run
when it frees.

Each test runs its jobs on kwok nodes of its own (conftest's ``gpu_pool``: labelled and tainted for it, a
ResourceFlavor that pins admitted pods there), so other tests' jobs holding GPUs on the shared nodes never
leave an admitted job Unschedulable, and the tests run in the parallel pass. The three-job test's
ClusterQueue holds 16 nvidia.com/gpu on two nodes of 8. Three jobs of 8 GPUs are submitted at once by
three real ``dag.test()`` runs, each in its own process with its own copy of the metadata database
(``dag.test()`` runs one task at a time and a deferred task's trigger inline, so one process could never
have three jobs waiting together; sqlite does not take three writers). Their pods run ``RUN_SECONDS`` on
the pool's nodes, long enough for the third job to really wait.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_disttrain.parameters import PodOptions, WaitPolicy
from tests.integration.conftest import REPO, GpuPool, gpu_pool, own_queue, training_dag, unique_dag_id

POOL_QUEUE = "pool-queue"  # the three-job test's LocalQueue, on a ClusterQueue of its pool's 16 GPUs

RUN_SECONDS = 25
STARTUP_TIMEOUT = 15  # shorter than the third job's wait in the queue: queue time must not count
QUOTA_WORDS = "couldn't assign flavors to pod set"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
TRAINJOBS = ("trainer.kubeflow.org", "v1alpha1")

HEADER = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.operators.train_job import TrainJobOperator
from airflow_provider_disttrain.parameters import MPIOptions, WaitPolicy

@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
"""
COMMON = (
    f"local_queue={POOL_QUEUE!r}, deferrable=True, "
    # A progress line per second at most after the first three (default 30 s): the waiting job's line with
    # Kueue's reason must not be folded into the next one when the job's start used the burst.
    f"wait_policy=WaitPolicy(poll_interval=1, startup_timeout={STARTUP_TIMEOUT}, progress_interval=1), "
    f"annotations={{'disttrain.test/run-seconds': '{RUN_SECONDS}'}}"
)
# Eight GPUs each: a PyTorchJob's Master and Worker with 4, an MPIJob's two Workers with 4 (no launcher
# GPU), a TrainJob's two torch-distributed nodes with 4.
TASKS = {
    "pytorch": "PyTorchJobOperator(task_id='train', image='busybox:1.36', command=['python', 'train.py'], "
    f"num_workers=1, gpus_per_replica=4, {COMMON})",
    "mpi": "MPIJobOperator(task_id='train', image='mpioperator/mpi-pi:openmpi', "
    "command=['mpirun', '/home/mpiuser/pi'], num_workers=2, mpi_options=MPIOptions(slots_per_worker=4), "
    f"gpus_per_replica=4, {COMMON})",
    "trainjob": "TrainJobOperator(task_id='train', runtime='torch-distributed', image='busybox:1.36', "
    f"command=['torchrun', 'train.py'], num_nodes=2, gpus_per_node=4, {COMMON})",
}
RUNNER = textwrap.dedent(
    """
    import sys
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(sys.argv[1])
    assert not bag.import_errors, bag.import_errors
    run = bag.get_dag(sys.argv[2]).test()
    print("DAG RUN STATE:", run.state)
    """
)


def _airflow_home(tmp_path: Path, name: str, database: Path) -> dict[str, str]:
    """An Airflow home of its own for one process: a copy of the session's migrated database."""
    home = tmp_path / name
    (home / "dags").mkdir(parents=True)
    # sqlite's backup API: a consistent copy, including what is still in the write-ahead log.
    with sqlite3.connect(database) as source, sqlite3.connect(home / "airflow.db") as copy:
        source.backup(copy)
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "PYTHONPATH": str(REPO),
    }


def _workloads(jobs: Any, namespace: str) -> list[dict[str, Any]]:
    return jobs.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "workloads")["items"]


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _epoch(stamp: str) -> float:
    from airflow_provider_disttrain.kube.conditions import parse_time

    parsed = parse_time(stamp)
    assert parsed is not None
    return parsed.timestamp()


@pytest.fixture
def sixteen_gpu_queue(admin_api: Any, namespace: str) -> Iterator[str]:
    """The LocalQueue ``POOL_QUEUE`` on a ClusterQueue of 16 GPUs, on two nodes of 8 of the test's own."""
    from kubernetes import client

    custom = client.CustomObjectsApi(admin_api)
    with (
        gpu_pool(admin_api, namespace, nodes=2) as pool,
        own_queue(custom, namespace, POOL_QUEUE, gpus=16, flavor=pool.flavor),
    ):
        yield POOL_QUEUE


@pytest.fixture
def unqueued_pool(admin_api: Any, namespace: str) -> Iterator[GpuPool]:
    with gpu_pool(admin_api, namespace) as pool:
        yield pool


def test_three_8_gpu_jobs_on_16_gpus_two_run_the_third_waits_for_quota_then_runs(
    namespace, airflow_db, jobs, tmp_path, sixteen_gpu_queue
):
    database = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    processes = {}
    for name, task in TASKS.items():
        dag_id = unique_dag_id(f"kueue_{name.replace('-', '_')}")
        env = _airflow_home(tmp_path, name, database)
        dag_file = Path(env["AIRFLOW__CORE__DAGS_FOLDER"]) / f"{dag_id}.py"
        dag_file.write_text(HEADER.format(dag_id=dag_id) + f"    {task}\n\npipeline()\n")
        processes[name] = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(dag_file), dag_id],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    # Kueue's own account while they run: never more than two admitted at once; one waits for GPU quota.
    most_admitted, waiting_messages = 0, []
    deadline = time.monotonic() + 600
    while any(process.poll() is None for process in processes.values()):
        assert time.monotonic() < deadline, "the three DAG runs did not finish within 10 minutes"
        workloads = _workloads(jobs, namespace)
        admitted = [  # a finished Workload keeps Admitted=True but gave its quota back
            w
            for w in workloads
            if _condition(w, "Admitted").get("status") == "True" and _condition(w, "Finished").get("status") != "True"
        ]
        most_admitted = max(most_admitted, len(admitted))
        waiting_messages += [
            _condition(w, "QuotaReserved").get("message", "")
            for w in workloads
            if _condition(w, "QuotaReserved").get("status") == "False"
        ]
        time.sleep(0.5)
    outputs = {name: process.stdout.read() for name, process in processes.items()}  # type: ignore[union-attr]

    for name, output in outputs.items():
        assert "DAG RUN STATE: success" in output, f"{name}:\n{output[-4000:]}"
    assert most_admitted == 2
    assert any(QUOTA_WORDS in message and "nvidia.com/gpu" in message for message in waiting_messages)
    # The waiting job said so in its task log, in Kueue's words (the trigger's progress lines).
    queued_logs = [name for name, output in outputs.items() if "queued by Kueue" in output and QUOTA_WORDS in output]
    assert len(queued_logs) >= 1, {name: output[-3000:] for name, output in outputs.items()}

    # Each job ran; one waited in the queue longer than startup_timeout and still started (the clock
    # starts at admission: its operator's Suspended=False transition).
    submitted = [
        (job, "Succeeded") for job in jobs.list("pytorchjobs", namespace) + jobs.list("mpijobs", namespace, "v2beta1")
    ] + [
        (job, "Complete")
        for job in jobs.custom.list_namespaced_custom_object(*TRAINJOBS, namespace, "trainjobs")["items"]
    ]
    assert sorted(job["kind"] for job, _ in submitted) == ["MPIJob", "PyTorchJob", "TrainJob"]
    waits = []
    for job, success in submitted:
        assert _condition(job, success).get("status") == "True", job["status"]
        # A job Kueue admitted at once may never have been seen suspended by its operator (no condition).
        if resumed := _condition(job, "Suspended"):
            assert resumed["status"] == "False", job["status"]  # Kueue held it, then released it
            waits.append(_epoch(resumed["lastTransitionTime"]) - _epoch(job["metadata"]["creationTimestamp"]))
    assert waits and max(waits) > STARTUP_TIMEOUT, waits


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_queue_timeout_fails_with_kueues_message_and_deletes_the_job(
    namespace, run_dag, jobs, small_queue, capfd, deferrable
):
    dag_id = unique_dag_id("kueue_timeout")
    job_name = f"waits-{dag_id[-6:]}"
    # Another user's running job holds the ClusterQueue's 8 GPUs for longer than the queue_timeout: the
    # task's job of 8 GPUs could run once they free (WaitingForQuota), but not within queue_timeout. (A
    # job that can never fit is refused at once: test_kueue_admission.py.)
    small_queue.submit_blocker("holds-the-gpus", gpus=8, run_seconds=180)
    jobs.wait_for(
        lambda: any(_condition(w, "Admitted").get("status") == "True" for w in small_queue.workloads()),
        timeout=60,
        what="the blocker admitted",
    )
    # Long enough for Kueue to have said why before it passes (a deferred task's trigger starts some
    # seconds after the submission on a loaded machine), short of the blocker's run.
    source = training_dag(
        dag_id,
        job_name=job_name,
        gpus_per_replica=4,
        local_queue=small_queue.name,
        deferrable=deferrable,
        wait_policy=WaitPolicy(queue_timeout=30),
    )

    result = run_dag(dag_id, source)

    output = "".join(capfd.readouterr())
    assert result.task_state("train") == "failed"
    assert "JobTimeoutError" in output
    assert "was not admitted by Kueue within queue_timeout" in output
    assert "insufficient unused quota for nvidia.com/gpu" in output
    assert "was deleted: it was still queued by Kueue" in output
    jobs.wait_for(lambda: jobs.get("pytorchjobs", namespace, job_name) is None, timeout=30, what="job deletion")
    jobs.wait_for(
        lambda: all(w["metadata"]["ownerReferences"][0]["name"] != job_name for w in _workloads(jobs, namespace)),
        timeout=30,
        what="its Workload's deletion",
    )


def test_a_job_without_queue_runs_unqueued(namespace, run_dag, jobs, unqueued_pool):
    dag_id = unique_dag_id("kueue_unqueued")
    job_name = f"unqueued-{dag_id[-6:]}"
    # No Kueue to pin it: the job's own node selector and toleration put its 8 GPUs on the test's node.
    pods = PodOptions(node_selector=unqueued_pool.node_selector, tolerations=unqueued_pool.tolerations)
    source = training_dag(dag_id, job_name=job_name, gpus_per_replica=8, deferrable=True, pod_options=pods)

    result = run_dag(dag_id, source)

    assert result.task_state("train") == "success"
    job = jobs.get("pytorchjobs", namespace, job_name)
    assert job is not None and "kueue.x-k8s.io/queue-name" not in job["metadata"].get("labels", {})
    assert not _condition(job, "Suspended")  # never held
    assert not [
        w for w in _workloads(jobs, namespace) if w["metadata"]["labels"].get(JOB_UID_LABEL) == job["metadata"]["uid"]
    ]
