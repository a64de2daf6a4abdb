"""The leader pod's termination message: which pod speaks for the job and what it said.

The MPI launcher's retries (a Succeeded run preferred) are told in test_metrics.py, which reads the
metrics through this module.
"""

from __future__ import annotations

from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.pods.termination import leader_termination_message
from tests.unit.fakes import make_pod

PYTORCHJOB = get_job_kind("PyTorchJob")


def test_the_master_speaks_for_a_pytorchjob_with_its_containers_last_words() -> None:
    pods = [
        make_pod("j", "worker", 0, phase="Succeeded", terminated={"exitCode": 0, "message": "a worker"}),
        make_pod("j", "master", 0, phase="Succeeded", terminated={"exitCode": 0, "message": '{"loss": 0.1}'}),
    ]

    assert leader_termination_message(PYTORCHJOB, pods) == ("master-0", '{"loss": 0.1}')


def test_without_a_master_the_first_worker_speaks_and_a_running_one_has_said_nothing_yet() -> None:
    assert leader_termination_message(PYTORCHJOB, [make_pod("j", "worker", 0)]) == ("worker-0", None)


def test_a_leader_whose_main_container_has_no_status_has_no_message() -> None:
    pod = make_pod("j", "master", 0, terminated={"exitCode": 0, "message": "sidecar words"}, container="sidecar")
    pod["spec"]["containers"].insert(0, {"name": "pytorch", "image": "busybox"})

    assert leader_termination_message(PYTORCHJOB, [pod]) == ("master-0", None)


def test_no_leader_pod_is_no_answer() -> None:
    assert leader_termination_message(PYTORCHJOB, []) is None
