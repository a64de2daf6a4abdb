"""A manifest without the leader its controller requires gets it built from the parameters, or is refused
naming it; a parameter no replica of the job would take is an error naming it, never dropped."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JOB_KINDS
from airflow_provider_disttrain.manifest.builder import JobParameters, build_manifest
from airflow_provider_disttrain.manifest.validation import validate_manifest
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.parameters import PyTorchOptions

MPI = JOB_KINDS["MPIJob"]
PYTORCH = JOB_KINDS["PyTorchJob"]
XGBOOST = JOB_KINDS["XGBoostJob"]
IMAGE = "mpioperator/mpi-pi:openmpi"
LAUNCHER_COMMAND = ["mpirun", "-n", "2", "/home/mpiuser/pi"]
SSH_WORKER = {"name": "worker", "image": IMAGE, "command": ["/usr/sbin/sshd", "-De"]}


def named(manifest: dict[str, Any]) -> dict[str, Any]:
    return {**manifest, "metadata": {"name": "pi"}}


def worker_only(kind_key: str = "mpiReplicaSpecs", container: dict[str, Any] | None = None) -> dict[str, Any]:
    """A manifest that only overrides the Worker (its node selector), as a user adds pod settings."""
    pod = {"nodeSelector": {"pool": "cpu"}, **({"containers": [container]} if container else {})}
    return {"spec": {kind_key: {"Worker": {"replicas": 2, "template": {"spec": pod}}}}}


def test_an_mpijob_manifest_of_workers_only_gets_the_launcher_built_from_the_parameters() -> None:
    params = JobParameters(image=IMAGE, command=LAUNCHER_COMMAND, args=["--fast"], env={"A": "1"})

    built = named(build_manifest(MPI, worker_only(container=SSH_WORKER), params))
    validate_manifest(MPI, built)

    specs = built["spec"]["mpiReplicaSpecs"]
    assert list(specs) == ["Launcher", "Worker"]
    launcher = specs["Launcher"]
    assert (launcher["replicas"], launcher["restartPolicy"]) == (1, "Never")
    assert launcher["template"]["spec"]["containers"] == [
        {
            "name": "mpi",
            "image": IMAGE,
            "command": LAUNCHER_COMMAND,
            "args": ["--fast"],
            "env": [{"name": "A", "value": "1"}],
        }
    ]
    # The manifest's Worker keeps its own command (sshd) and settings; the image parameter applies to it.
    worker = specs["Worker"]["template"]["spec"]
    assert worker["nodeSelector"] == {"pool": "cpu"}
    assert worker["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]


def test_an_xgboostjob_manifest_without_its_master_gets_one() -> None:
    built = named(build_manifest(XGBOOST, worker_only("xgbReplicaSpecs"), JobParameters(image=IMAGE)))
    validate_manifest(XGBOOST, built)

    assert set(built["spec"]["xgbReplicaSpecs"]) == {"Master", "Worker"}


def test_an_mpijob_without_a_launcher_and_no_image_is_refused_naming_the_launcher() -> None:
    built = named(build_manifest(MPI, worker_only(container=SSH_WORKER), JobParameters()))

    with pytest.raises(InvalidJobSpecError) as refused:
        validate_manifest(MPI, built)

    assert refused.value.field == "spec.mpiReplicaSpecs.Launcher"
    assert "is required" in refused.value.problem


def test_a_launcher_command_with_no_launcher_to_run_it_is_an_error_naming_the_parameter() -> None:
    with pytest.raises(InvalidJobSpecError) as refused:
        build_manifest(MPI, worker_only(container=SSH_WORKER), JobParameters(command=LAUNCHER_COMMAND))

    assert refused.value.field == "command"
    assert "would be dropped" in refused.value.problem
    assert "no Launcher" in refused.value.problem


def test_resources_for_a_replica_the_job_lacks_are_an_error_naming_the_replica() -> None:
    elastic = {
        "spec": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 2}, **worker_only("pytorchReplicaSpecs")["spec"]}
    }
    params = JobParameters(
        image=IMAGE, resources={"Master": {"limits": {"cpu": "1"}}, "Worker": {"limits": {"cpu": "2"}}}
    )

    with pytest.raises(InvalidJobSpecError) as refused:
        build_manifest(PYTORCH, elastic, params)

    assert refused.value.field == "replica_resources.Master"
    assert "would be dropped" in refused.value.problem


def test_a_pytorchjob_manifest_of_workers_only_keeps_its_replicas() -> None:
    # A valid topology for the training-operator (elastic, or independent workers): not changed unasked.
    built = build_manifest(PYTORCH, worker_only("pytorchReplicaSpecs"), JobParameters(image=IMAGE))

    assert list(built["spec"]["pytorchReplicaSpecs"]) == ["Worker"]


def test_with_master_builds_a_master_beside_a_manifest_without_one() -> None:
    operator = PyTorchJobOperator(
        task_id="t",
        image=IMAGE,
        command=["python", "train.py"],
        pytorch_options=PyTorchOptions(with_master=True),
        job_manifest=worker_only("pytorchReplicaSpecs"),
    )

    specs = operator.assemble_manifest()["spec"]["pytorchReplicaSpecs"]

    assert list(specs) == ["Master", "Worker"]
    assert specs["Master"]["template"]["spec"]["containers"][0]["command"] == ["python", "train.py"]


def test_with_master_false_beside_a_manifest_with_a_master_is_an_error() -> None:
    manifest = {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}}}
    operator = PyTorchJobOperator(
        task_id="t", image=IMAGE, pytorch_options=PyTorchOptions(with_master=False), job_manifest=manifest
    )

    with pytest.raises(InvalidJobSpecError) as refused:
        operator.assemble_manifest()

    assert refused.value.field == "pytorch_options.with_master"
