"""Reading the leader's termination message as the job's metrics (pure, over pods as the API returns them)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_provider_disttrain.job.kinds import JOB_ROLE_LABEL, get_job_kind
from airflow_provider_disttrain.pods.metrics import leader_metrics
from tests.unit.fakes import END, RUNNING_AT, make_pod

PYTORCH = get_job_kind("PyTorchJob")
MPI = get_job_kind("MPIJob")


def finished(message: str | None, exit_code: int = 0, at: str = END) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": "Completed", "exitCode": exit_code, "startedAt": RUNNING_AT, "finishedAt": at}
    if message is not None:
        state["message"] = message
    return state


def test_the_masters_json_object_is_the_metrics_not_a_workers():
    pods = [
        make_pod("j", "worker", 0, terminated=finished('{"accuracy": 0.1}')),
        make_pod("j", "master", 0, terminated=finished('{"accuracy": 0.93, "loss": 0.2}\n')),
    ]
    assert leader_metrics(PYTORCH, pods) == ({"accuracy": 0.93, "loss": 0.2}, "")


def test_worker_0_speaks_for_a_job_without_a_master():
    pods = [
        make_pod("j", "worker", 1, terminated=finished('{"accuracy": 0.1}')),
        make_pod("j", "worker", 0, terminated=finished('{"accuracy": 0.8}')),
    ]
    assert leader_metrics(PYTORCH, pods) == ({"accuracy": 0.8}, "")


def test_the_mpi_launcher_run_that_succeeded_counts_among_its_retries():
    failed = make_pod(
        "j", "launcher", replica_label=JOB_ROLE_LABEL, phase="Failed", terminated=finished("boom", 1, at=END)
    )
    later = make_pod(
        "j", "launcher", replica_label=JOB_ROLE_LABEL, phase="Succeeded", terminated=finished('{"accuracy": 0.7}')
    )
    later["metadata"]["name"] += "b"
    worker = make_pod("j", "worker", 0, replica_label=JOB_ROLE_LABEL, terminated=finished('{"accuracy": 0}'))
    assert leader_metrics(MPI, [failed, later, worker]) == ({"accuracy": 0.7}, "")


@pytest.mark.parametrize(
    ("pods", "why"),
    [
        ([], "the leader pod is gone"),
        ([make_pod("j", "master", 0, terminated=finished(None))], "wrote no termination message"),
        ([make_pod("j", "master", 0)], "wrote no termination message"),  # still running: no terminated state
        ([make_pod("j", "master", 0, terminated=finished("accuracy=0.9"))], "is not JSON"),
        ([make_pod("j", "master", 0, terminated=finished("[0.9, 0.8]"))], "is JSON but not an object"),
        ([make_pod("j", "master", 0, terminated=finished('"0.9"'))], "is JSON but not an object"),
    ],
)
def test_no_metrics_says_why(pods, why):
    metrics, reason = leader_metrics(PYTORCH, pods)
    assert metrics is None
    assert why in reason


def test_a_message_at_the_kubelets_4_kb_limit_still_parses():
    body = {"accuracy": 0.9, "notes": "x" * (4096 - 40)}
    message = json.dumps(body)
    assert len(message.encode()) <= 4096
    assert leader_metrics(PYTORCH, [make_pod("j", "master", 0, terminated=finished(message))])[0] == body
