"""GPUs of a job: what each replica type asks for, from the real example manifests with GPU limits, and
what the job holds now, from its status alone (the trigger's trimmed view) given what it asks for."""

from __future__ import annotations

from typing import Any

from airflow_provider_disttrain.hooks.shared_watch import trimmed
from airflow_provider_disttrain.job.gpus import gpus_held, gpus_per_replica
from airflow_provider_disttrain.job.view import JobView
from tests.unit.conftest import read_yaml


def mpijob_with_gpus(per_worker: int) -> dict[str, Any]:
    manifest = read_yaml("manifests/mpijob.yaml")
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["resources"]["limits"]["nvidia.com/gpu"] = per_worker
    return manifest


def test_only_the_replica_types_that_ask_for_gpus_are_named() -> None:
    # The launcher asks for none: it only runs mpirun.
    assert gpus_per_replica(mpijob_with_gpus(8)) == {"Worker": 8}


def test_a_trainjob_asks_for_the_trainer_s_resources_per_node() -> None:
    manifest = read_yaml("manifests/trainjob.yaml")
    manifest["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"amd.com/gpu": "4"}}

    assert gpus_per_replica(manifest) == {"node": 4}


def test_the_trimmed_view_of_a_running_job_holds_its_active_replicas_gpus() -> None:
    asked = gpus_per_replica(mpijob_with_gpus(8))
    running = mpijob_with_gpus(8) | {
        "status": {
            "conditions": [{"type": "Running", "status": "True", "lastTransitionTime": "2024-05-14T10:02:30Z"}],
            "replicaStatuses": {"Launcher": {"active": 1}, "Worker": {"active": 2}},
        }
    }
    view = trimmed(running)

    assert "spec" not in view
    assert gpus_held(JobView.of(view), asked) == 16
    assert gpus_held(JobView.of(running)) == 16  # read whole, the job says what it asks for itself
    assert gpus_held(JobView.of(view)) == 0  # without what it asks for, the view cannot tell


def test_a_job_that_finished_holds_none() -> None:
    finished = read_yaml("status/mpijob-succeeded.yaml")

    assert gpus_held(JobView.of(finished), {"Worker": 8, "Launcher": 8}) == 0
