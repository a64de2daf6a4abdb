"""Merge patches for scaling, suspending and resuming a job that already runs."""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JOB_KINDS
from airflow_provider_disttrain.manifest.patches import current_workers, scale_patch, suspend_patch

PYTORCH = JOB_KINDS["PyTorchJob"]
MPI = JOB_KINDS["MPIJob"]
TF = JOB_KINDS["TFJob"]


@pytest.mark.parametrize(
    ("fixture", "kind", "workers"),
    [
        ("status/pytorchjob-running.yaml", "PyTorchJob", 1),
        ("manifests/pytorchjob-elastic.yaml", "PyTorchJob", 2),
        ("status/mpijob-succeeded.yaml", "MPIJob", 2),
        ("manifests/tfjob.yaml", "TFJob", 4),
    ],
)
def test_current_workers_reads_the_worker_replicas(load_yaml, fixture, kind, workers):
    assert current_workers(JOB_KINDS[kind], load_yaml(fixture)) == workers


@pytest.mark.parametrize(
    "job",
    [
        {},
        {"spec": None},
        {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}}},
        {"spec": {"pytorchReplicaSpecs": {"Worker": {}}}},
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "3"}}}},
        {"spec": {"pytorchReplicaSpecs": ["Worker"]}},
    ],
    ids=["empty", "spec null", "master only", "no replicas field", "replicas as text", "specs as list"],
)
def test_current_workers_is_none_when_there_is_no_worker_count(job):
    assert current_workers(PYTORCH, job) is None


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_scaling_an_elastic_job_within_its_range(load_yaml, replicas):
    job = load_yaml("manifests/pytorchjob-elastic.yaml")
    assert scale_patch(PYTORCH, job, replicas) == {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": replicas}}}}


@pytest.mark.parametrize("replicas", [4, 10])
def test_scaling_an_elastic_job_above_its_maximum_is_refused(load_yaml, replicas):
    job = load_yaml("manifests/pytorchjob-elastic.yaml")

    with pytest.raises(InvalidJobSpecError) as excinfo:
        scale_patch(PYTORCH, job, replicas)

    assert excinfo.value.field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert excinfo.value.problem == f"{replicas} is outside the job's elasticPolicy range [1, 3]"


def test_scaling_an_elastic_job_below_its_minimum_is_refused(load_yaml):
    job = load_yaml("manifests/pytorchjob-elastic.yaml")
    job["spec"]["elasticPolicy"]["minReplicas"] = 2

    with pytest.raises(InvalidJobSpecError, match=r"1 is outside the job's elasticPolicy range \[2, 3\]"):
        scale_patch(PYTORCH, job, 1)


def test_an_elastic_policy_with_only_a_maximum_bounds_only_from_above(load_yaml):
    job = load_yaml("manifests/pytorchjob-elastic.yaml")
    del job["spec"]["elasticPolicy"]["minReplicas"]

    assert scale_patch(PYTORCH, job, 1)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    with pytest.raises(InvalidJobSpecError, match=r"range \[None, 3\]"):
        scale_patch(PYTORCH, job, 4)


def test_scaling_a_running_non_elastic_pytorchjob_is_refused(load_yaml):
    # Its pods got WORLD_SIZE when they started: a new worker would never join, a removed one stalls the rest.
    job = load_yaml("status/pytorchjob-running.yaml")

    with pytest.raises(InvalidJobSpecError, match="no elasticPolicy") as excinfo:
        scale_patch(PYTORCH, job, 16)

    assert excinfo.value.field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert "WORLD_SIZE" in excinfo.value.problem
    assert "suspend" in excinfo.value.problem


def test_a_suspended_non_elastic_job_scales_to_any_positive_count(load_yaml):
    # Resuming recreates every pod, with the world size of the new count.
    job = load_yaml("status/pytorchjob-running.yaml")
    job["spec"].setdefault("runPolicy", {})["suspend"] = True
    assert scale_patch(PYTORCH, job, 16) == {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 16}}}}


def test_scaling_patches_a_worker_spec_stored_in_lower_case(load_yaml):
    # A patch of "Worker" beside a stored "worker" would be undone by the operator's renaming.
    job = load_yaml("manifests/pytorchjob-elastic.yaml")
    specs = job["spec"]["pytorchReplicaSpecs"]
    specs["worker"] = specs.pop("Worker")

    assert current_workers(PYTORCH, job) == 2
    assert scale_patch(PYTORCH, job, 3) == {"spec": {"pytorchReplicaSpecs": {"worker": {"replicas": 3}}}}


def test_scaling_an_mpijob_patches_mpi_replica_specs(load_yaml):
    job = load_yaml("manifests/mpijob.yaml")
    assert scale_patch(MPI, job, 4) == {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 4}}}}


def test_a_running_job_of_a_kind_without_elastic_training_is_not_scaled(load_yaml):
    # An elasticPolicy written on a TFJob means nothing to the operator: its pods keep their TF_CONFIG.
    job = load_yaml("manifests/tfjob.yaml")
    job["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2}

    with pytest.raises(InvalidJobSpecError, match="TFJob has no elastic training") as excinfo:
        scale_patch(TF, job, 8)

    assert excinfo.value.field == "spec.tfReplicaSpecs.Worker.replicas"


@pytest.mark.parametrize("replicas", [0, -1, True, 2.0, "3", None])
def test_scaling_to_something_other_than_a_positive_integer_is_refused(load_yaml, replicas):
    job = load_yaml("manifests/pytorchjob-elastic.yaml")

    with pytest.raises(InvalidJobSpecError) as excinfo:
        scale_patch(PYTORCH, job, replicas)  # type: ignore[arg-type]

    assert excinfo.value.field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert excinfo.value.problem == f"replicas must be an integer >= 1, got {replicas!r}"


def test_a_job_without_worker_replicas_cannot_be_scaled():
    job = {
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch"}]}}}
            }
        }
    }

    with pytest.raises(InvalidJobSpecError) as excinfo:
        scale_patch(PYTORCH, job, 2)

    assert excinfo.value.field == "spec.pytorchReplicaSpecs.Worker.replicas"
    assert excinfo.value.problem == "the job has no Worker replicas to scale"


@pytest.mark.parametrize("suspend", [True, False])
def test_suspend_and_resume_patch_run_policy_suspend(suspend):
    assert suspend_patch(PYTORCH, suspend) == {"spec": {"runPolicy": {"suspend": suspend}}}
    assert suspend_patch(MPI, suspend) == {"spec": {"runPolicy": {"suspend": suspend}}}


TRAIN_JOB = JOB_KINDS["TrainJob"]


@pytest.mark.parametrize("suspend", [True, False])
def test_a_trainjob_keeps_suspend_in_its_spec(suspend):
    assert suspend_patch(TRAIN_JOB, suspend) == {"spec": {"suspend": suspend}}


def test_a_trainjob_s_node_count_is_its_worker_count_and_cannot_change(load_yaml):
    job = load_yaml("status/trainjob-suspended.yaml")
    assert current_workers(TRAIN_JOB, job) == 3

    with pytest.raises(InvalidJobSpecError) as excinfo:
        scale_patch(TRAIN_JOB, job, 4)
    assert excinfo.value.field == "spec.trainer.numNodes"
