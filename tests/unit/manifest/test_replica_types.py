"""Replica types as the operators read them: TFJob's Master, and names written in another case.

The training-operator's defaulter (``setTypeNameToCamelCase``) renames a replica spec whose key
matches one of the kind's types case-insensitively; its PyTorchJob webhook compares keys exactly,
so the builder submits the canonical name. The mpi-operator matches ``Launcher``/``Worker`` exactly.
"""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JOB_KINDS
from airflow_provider_disttrain.manifest.builder import JobParameters, build_manifest
from airflow_provider_disttrain.manifest.validation import validate_manifest
from airflow_provider_disttrain.pods.logs import leader_pods
from tests.unit.fakes import make_pod

PYTORCH = JOB_KINDS["PyTorchJob"]
MPI = JOB_KINDS["MPIJob"]
TF = JOB_KINDS["TFJob"]


def _replica(container: str, replicas: int = 1) -> dict:
    return {"replicas": replicas, "template": {"spec": {"containers": [{"name": container, "image": "img:1"}]}}}


def _job(kind, specs: dict) -> dict:
    return {
        "apiVersion": kind.resource.api_version,
        "kind": kind.kind,
        "metadata": {"name": "job"},
        "spec": {kind.replica_specs_key: specs},
    }


def test_a_tfjob_with_a_master_replica_is_valid():
    manifest = _job(TF, {"Master": _replica("tensorflow"), "Worker": _replica("tensorflow", 2)})
    validate_manifest(TF, build_manifest(TF, manifest))


def test_a_tfjob_master_has_exactly_one_replica_like_a_chief():
    manifest = _job(TF, {"Master": _replica("tensorflow", 2), "Worker": _replica("tensorflow", 2)})

    with pytest.raises(InvalidJobSpecError) as raised:
        validate_manifest(TF, build_manifest(TF, manifest))

    assert raised.value.field == "spec.tfReplicaSpecs.Master.replicas"


def test_a_tfjob_cannot_have_both_a_chief_and_a_master():
    manifest = _job(TF, {"Chief": _replica("tensorflow"), "Master": _replica("tensorflow")})

    with pytest.raises(InvalidJobSpecError, match="not both") as raised:
        validate_manifest(TF, build_manifest(TF, manifest))

    assert raised.value.field == "spec.tfReplicaSpecs"


@pytest.mark.parametrize(
    ("kind", "written", "canonical"),
    [
        (PYTORCH, {"master": "pytorch", "worker": "pytorch"}, ["Master", "Worker"]),
        (PYTORCH, {"MASTER": "pytorch", "Worker": "pytorch"}, ["Master", "Worker"]),
        (TF, {"ps": "tensorflow", "worker": "tensorflow", "chief": "tensorflow"}, ["Chief", "PS", "Worker"]),
        (TF, {"evaluator": "tensorflow", "master": "tensorflow"}, ["Evaluator", "Master"]),
        (JOB_KINDS["XGBoostJob"], {"master": "xgboost", "worker": "xgboost"}, ["Master", "Worker"]),
        (JOB_KINDS["PaddleJob"], {"master": "paddle", "worker": "paddle"}, ["Master", "Worker"]),
        (JOB_KINDS["JAXJob"], {"worker": "jax"}, ["Worker"]),
    ],
)
def test_replica_types_in_another_case_are_accepted_and_submitted_as_the_operator_names_them(kind, written, canonical):
    manifest = build_manifest(kind, _job(kind, {name: _replica(container) for name, container in written.items()}))

    validate_manifest(kind, manifest)
    assert sorted(manifest["spec"][kind.replica_specs_key]) == canonical


def test_builder_parameters_apply_to_a_lower_case_worker_instead_of_adding_a_second_one():
    base = _job(PYTORCH, {"master": _replica("pytorch"), "worker": _replica("pytorch")})

    manifest = build_manifest(PYTORCH, base, JobParameters(num_workers=3, image="img:2"))

    specs = manifest["spec"]["pytorchReplicaSpecs"]
    assert sorted(specs) == ["Master", "Worker"]
    assert specs["Worker"]["replicas"] == 3
    assert specs["Worker"]["template"]["spec"]["containers"][0]["image"] == "img:2"
    validate_manifest(PYTORCH, manifest)


def test_a_replica_type_written_twice_in_different_cases_is_refused():
    # The operator would keep one of the two specs and silently drop the other.
    base = _job(PYTORCH, {"Worker": _replica("pytorch"), "worker": _replica("pytorch", 3)})

    with pytest.raises(InvalidJobSpecError, match="Worker") as raised:
        validate_manifest(PYTORCH, build_manifest(PYTORCH, base))

    assert raised.value.field == "spec.pytorchReplicaSpecs.worker"


def test_mpijob_replica_types_must_be_written_exactly():
    base = _job(MPI, {"launcher": _replica("mpi"), "Worker": _replica("mpi")})

    with pytest.raises(InvalidJobSpecError, match="'Launcher'") as raised:
        validate_manifest(MPI, build_manifest(MPI, base))

    assert raised.value.field == "spec.mpiReplicaSpecs.launcher"


def test_an_unknown_replica_type_is_still_refused():
    base = _job(PYTORCH, {"Master": _replica("pytorch"), "Workers": _replica("pytorch")})

    with pytest.raises(InvalidJobSpecError, match="unknown replica type") as raised:
        validate_manifest(PYTORCH, build_manifest(PYTORCH, base))

    assert raised.value.field == "spec.pytorchReplicaSpecs.Workers"


def test_the_leader_of_a_tfjob_with_a_master_is_master_0():
    pods = [make_pod("tf", "worker", 0, container="tensorflow"), make_pod("tf", "master", 0, container="tensorflow")]

    assert [pod["metadata"]["name"] for pod in leader_pods(TF, pods)] == ["tf-master-0"]


def test_the_leader_of_a_tfjob_with_a_chief_is_still_chief_0():
    pods = [make_pod("tf", "worker", 0, container="tensorflow"), make_pod("tf", "chief", 0, container="tensorflow")]

    assert [pod["metadata"]["name"] for pod in leader_pods(TF, pods)] == ["tf-chief-0"]
