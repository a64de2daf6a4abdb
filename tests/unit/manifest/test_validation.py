"""Checks run before anything is sent: each rule names the offending field and explains the problem."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError, TrainingJobError
from airflow_provider_disttrain.job.kinds import JOB_KINDS
from airflow_provider_disttrain.manifest.validation import (
    max_job_name_length,
    replica_counts,
    validate_manifest,
    validate_name,
)

PYTORCH = JOB_KINDS["PyTorchJob"]
MPI = JOB_KINDS["MPIJob"]
TF = JOB_KINDS["TFJob"]

MASTER = "spec.pytorchReplicaSpecs.Master"
WORKER = "spec.pytorchReplicaSpecs.Worker"
WORKER_CONTAINER = f"{WORKER}.template.spec.containers[pytorch]"
LAUNCHER = "spec.mpiReplicaSpecs.Launcher"


def pod_spec(manifest: dict, replica: str, key: str = "pytorchReplicaSpecs") -> dict:
    return manifest["spec"][key][replica]["template"]["spec"]


def container(manifest: dict, replica: str, key: str = "pytorchReplicaSpecs") -> dict:
    return pod_spec(manifest, replica, key)["containers"][0]


# -- valid manifests pass ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "kind"),
    [
        ("manifests/pytorchjob.yaml", "PyTorchJob"),
        ("manifests/pytorchjob-elastic.yaml", "PyTorchJob"),
        ("manifests/mpijob.yaml", "MPIJob"),
        ("manifests/tfjob.yaml", "TFJob"),
        # Job objects as read back from the cluster validate too (reattach compares them).
        ("status/pytorchjob-succeeded.yaml", "PyTorchJob"),
        ("status/pytorchjob-restarting.yaml", "PyTorchJob"),
        ("status/mpijob-succeeded.yaml", "MPIJob"),
    ],
)
def test_the_documented_examples_are_valid(load_yaml, fixture, kind):
    validate_manifest(JOB_KINDS[kind], load_yaml(fixture))


@pytest.mark.parametrize("gpus", [1, 8, "2", 0])
def test_whole_gpu_counts_are_valid(load_yaml, gpus):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    container(manifest, "Worker")["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    validate_manifest(PYTORCH, manifest)


def test_a_name_exactly_at_the_limit_is_valid(load_yaml):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    manifest["metadata"]["name"] = "p" * 54
    validate_manifest(PYTORCH, manifest)


# -- each rule ---------------------------------------------------------------------------------------


def _set(path: str, value: object) -> Callable[[dict], None]:
    """A mutation setting ``a.b.c`` (dict keys only) to value; ``None`` deletes it."""

    def mutate(manifest: dict) -> None:
        *parents, last = path.split(".")
        target = manifest
        for part in parents:
            target = target[part]
        if value is None:
            del target[last]
        else:
            target[last] = value

    return mutate


def _worker_container(**changes: object) -> Callable[[dict], None]:
    def mutate(manifest: dict) -> None:
        target = container(manifest, "Worker")
        for key, value in changes.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value

    return mutate


def _rename_containers(manifest: dict) -> None:
    for replica in ("Master", "Worker"):
        container(manifest, replica)["name"] = "trainer"


def _sixty_char_name_with_ten_workers(manifest: dict) -> None:
    manifest["metadata"]["name"] = "n" * 60
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 10


PYTORCH_RULES = [
    (
        "wrong apiVersion",
        _set("apiVersion", "kubeflow.org/v1beta1"),
        "apiVersion",
        "'kubeflow.org/v1beta1' does not match PyTorchJob (kubeflow.org/v1)",
    ),
    ("missing apiVersion", _set("apiVersion", None), "apiVersion", "None does not match PyTorchJob"),
    (
        "wrong kind",
        _set("kind", "TFJob"),
        "kind",
        "the manifest is a 'TFJob' (kubeflow.org/v1), but this operator submits PyTorchJobs; "
        "submit it with TrainingJobOperator(kind='TFJob')",
    ),
    ("no spec", _set("spec", None), "spec", "must be a mapping, got NoneType"),
    ("spec is a list", _set("spec", []), "spec", "must be a mapping, got list"),
    (
        "no replica specs",
        _set("spec.pytorchReplicaSpecs", None),
        "spec.pytorchReplicaSpecs",
        "must be a mapping, got NoneType",
    ),
    (
        "empty replica specs",
        _set("spec.pytorchReplicaSpecs", {}),
        "spec.pytorchReplicaSpecs",
        "at least one replica spec is required",
    ),
    (
        "unknown replica type",
        _set("spec.pytorchReplicaSpecs.Chief", {"replicas": 1}),
        "spec.pytorchReplicaSpecs.Chief",
        "unknown replica type for PyTorchJob; expected one of ['Master', 'Worker']",
    ),
    (
        # A lower-case replica type alone is valid (the operator renames it); beside its canonical
        # spelling the operator would keep one of the two specs.
        "replica type in lower case beside the canonical one",
        lambda m: m["spec"]["pytorchReplicaSpecs"].update(worker=m["spec"]["pytorchReplicaSpecs"]["Worker"]),
        "spec.pytorchReplicaSpecs.worker",
        "is Worker written in another case, and Worker is given too",
    ),
    ("replica spec is a list", _set(f"{WORKER}", ["pytorch"]), WORKER, "must be a mapping, got list"),
    ("two masters", _set(f"{MASTER}.replicas", 2), f"{MASTER}.replicas", "must be 1, got 2"),
    ("zero masters", _set(f"{MASTER}.replicas", 0), f"{MASTER}.replicas", "must be 1, got 0"),
    ("zero workers", _set(f"{WORKER}.replicas", 0), f"{WORKER}.replicas", "must be at least 1 worker, got 0"),
    ("negative workers", _set(f"{WORKER}.replicas", -1), f"{WORKER}.replicas", "must be at least 0, got -1"),
    ("replicas as text", _set(f"{WORKER}.replicas", "2"), f"{WORKER}.replicas", "must be an integer, got '2'"),
    ("replicas as bool", _set(f"{WORKER}.replicas", True), f"{WORKER}.replicas", "must be an integer, got True"),
    (
        "unknown restart policy",
        _set(f"{WORKER}.restartPolicy", "Sometimes"),
        f"{WORKER}.restartPolicy",
        "'Sometimes' is not allowed for PyTorchJob; expected one of ['Always', 'ExitCode', 'Never', 'OnFailure']",
    ),
    ("no template", _set(f"{WORKER}.template", None), f"{WORKER}.template", "must be a mapping, got NoneType"),
    (
        "no pod spec",
        _set(f"{WORKER}.template.spec", None),
        f"{WORKER}.template.spec",
        "must be a mapping, got NoneType",
    ),
    (
        "no containers",
        _set(f"{WORKER}.template.spec.containers", []),
        f"{WORKER}.template.spec.containers",
        "at least one container is required",
    ),
    (
        "no container named pytorch",
        _rename_containers,
        f"{MASTER}.template.spec.containers",
        "no container named 'pytorch' (found ['trainer']); the PyTorchJob operator only runs the container "
        "with that name",
    ),
    (
        "missing image",
        _worker_container(image=None),
        f"{WORKER_CONTAINER}.image",
        "is required (set image= or the container's image)",
    ),
    ("blank image", _worker_container(image="  "), f"{WORKER_CONTAINER}.image", "is required"),
    (
        "command as one string",
        _worker_container(command="python3 /opt/pytorch-mnist/mnist.py"),
        f"{WORKER_CONTAINER}.command",
        "must be a list of strings, got 'python3 /opt/pytorch-mnist/mnist.py'",
    ),
    (
        "args with a number",
        _worker_container(args=["--epochs", 1]),
        f"{WORKER_CONTAINER}.args",
        "must be a list of strings, got ['--epochs', 1]",
    ),
    (
        "fractional gpu limit",
        _worker_container(resources={"limits": {"nvidia.com/gpu": "1.5"}}),
        f"{WORKER_CONTAINER}.resources.limits.nvidia.com/gpu",
        "must be an integer, got '1.5'",
    ),
    (
        "negative gpu limit",
        _worker_container(resources={"limits": {"nvidia.com/gpu": -1}}),
        f"{WORKER_CONTAINER}.resources.limits.nvidia.com/gpu",
        "must be greater than or equal to 0, got -1",
    ),
    ("no name", _set("metadata.name", None), "metadata.name", "is required"),
    (
        "upper-case name",
        _set("metadata.name", "PyTorch-Simple"),
        "metadata.name",
        "'PyTorch-Simple' is not a DNS-1035 label (lower-case letters, digits and '-'",
    ),
    ("underscore in name", _set("metadata.name", "pytorch_simple"), "metadata.name", "is not a DNS-1035 label"),
    ("name starting with a digit", _set("metadata.name", "1-mnist"), "metadata.name", "is not a DNS-1035 label"),
    (
        "name too long once -worker-9 is appended",
        _sixty_char_name_with_ten_workers,
        "metadata.name",
        f"{'n' * 60!r} has 60 characters; at most 54 fit once the operator appends '-<replica>-<index>'",
    ),
    (
        "invalid label value",
        _set("metadata.labels", {"disttrain.airflow.apache.org/run-id": "manual__2026-11-30T08:37:02+00:00"}),
        "metadata.labels.disttrain.airflow.apache.org/run-id",
        "'manual__2026-11-30T08:37:02+00:00' is not a valid label value",
    ),
    ("numeric label value", _set("metadata.labels", {"epochs": 3}), "metadata.labels.epochs", "3 is not a valid"),
    (
        "invalid cleanPodPolicy",
        _set("spec.runPolicy", {"cleanPodPolicy": "Always"}),
        "spec.runPolicy.cleanPodPolicy",
        "'Always' is not one of ['All', 'None', 'Running']",
    ),
    (
        "negative ttl",
        _set("spec.runPolicy", {"ttlSecondsAfterFinished": -1}),
        "spec.runPolicy.ttlSecondsAfterFinished",
        "must be at least 0, got -1",
    ),
    (
        "deadline as text",
        _set("spec.runPolicy", {"activeDeadlineSeconds": "1h"}),
        "spec.runPolicy.activeDeadlineSeconds",
        "must be an integer, got '1h'",
    ),
    (
        "negative backoffLimit",
        _set("spec.runPolicy", {"backoffLimit": -3}),
        "spec.runPolicy.backoffLimit",
        "must be at least 0, got -3",
    ),
    (
        "gang of zero",
        _set("spec.runPolicy", {"schedulingPolicy": {"minAvailable": 0}}),
        "spec.runPolicy.schedulingPolicy.minAvailable",
        "must be at least 1, got 0",
    ),
    ("runPolicy is a list", _set("spec.runPolicy", ["All"]), "spec.runPolicy", "must be a mapping, got list"),
]


@pytest.mark.parametrize(
    ("story", "mutate", "field", "message"), PYTORCH_RULES, ids=[rule[0] for rule in PYTORCH_RULES]
)
def test_each_pytorchjob_rule_names_the_field_and_explains(load_yaml, story, mutate, field, message):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    mutate(manifest)

    with pytest.raises(InvalidJobSpecError) as excinfo:
        validate_manifest(PYTORCH, manifest)

    assert excinfo.value.field == field
    assert message in excinfo.value.problem
    assert str(excinfo.value) == f"{field}: {excinfo.value.problem}"


ELASTIC_RULES = [
    (
        "min above max",
        _set("spec.elasticPolicy.minReplicas", 4),
        "spec.elasticPolicy.minReplicas",
        "4 is greater than maxReplicas 3",
    ),
    ("min zero", _set("spec.elasticPolicy.minReplicas", 0), "spec.elasticPolicy.minReplicas", "at least 1, got 0"),
    (
        "max as text",
        _set("spec.elasticPolicy.maxReplicas", "3"),
        "spec.elasticPolicy.maxReplicas",
        "must be an integer, got '3'",
    ),
    (
        "workers above max",
        _set(f"{WORKER}.replicas", 5),
        f"{WORKER}.replicas",
        "5 is outside elasticPolicy [1, 3]",
    ),
    (
        "workers below min",
        lambda m: m["spec"]["elasticPolicy"].update(minReplicas=3),
        f"{WORKER}.replicas",
        "2 is outside elasticPolicy [3, 3]",
    ),
    (
        "invalid rendezvous backend",
        _set("spec.elasticPolicy.rdzvBackend", "gloo"),
        "spec.elasticPolicy.rdzvBackend",
        "'gloo' is not one of ['c10d', 'etcd', 'etcd-v2']",
    ),
    (
        "negative maxRestarts",
        _set("spec.elasticPolicy.maxRestarts", -1),
        "spec.elasticPolicy.maxRestarts",
        "must be at least 0, got -1",
    ),
    ("elasticPolicy is a list", _set("spec.elasticPolicy", [1, 3]), "spec.elasticPolicy", "must be a mapping"),
]


@pytest.mark.parametrize(
    ("story", "mutate", "field", "message"), ELASTIC_RULES, ids=[rule[0] for rule in ELASTIC_RULES]
)
def test_each_elastic_rule_names_the_field_and_explains(load_yaml, story, mutate, field, message):
    manifest = load_yaml("manifests/pytorchjob-elastic.yaml")
    mutate(manifest)

    with pytest.raises(InvalidJobSpecError) as excinfo:
        validate_manifest(PYTORCH, manifest)

    assert excinfo.value.field == field
    assert message in excinfo.value.problem


def _launcher(**changes: object) -> Callable[[dict], None]:
    def mutate(manifest: dict) -> None:
        manifest["spec"]["mpiReplicaSpecs"]["Launcher"].update(changes)

    return mutate


MPI_RULES = [
    (
        "the training-operator's old v1 MPIJob",
        _set("apiVersion", "kubeflow.org/v1"),
        "apiVersion",
        "'kubeflow.org/v1' does not match MPIJob (kubeflow.org/v2beta1)",
    ),
    (
        "launcher restartPolicy Always",
        _launcher(restartPolicy="Always"),
        f"{LAUNCHER}.restartPolicy",
        "'Always' is not allowed for MPIJob; expected one of ['Never', 'OnFailure']",
    ),
    (
        "worker restartPolicy ExitCode",
        _set("spec.mpiReplicaSpecs.Worker.restartPolicy", "ExitCode"),
        "spec.mpiReplicaSpecs.Worker.restartPolicy",
        "'ExitCode' is not allowed for MPIJob",
    ),
    ("two launchers", _launcher(replicas=2), f"{LAUNCHER}.replicas", "must be 1, got 2"),
    (
        "a Master in an MPIJob",
        _set("spec.mpiReplicaSpecs.Master", {"replicas": 1}),
        "spec.mpiReplicaSpecs.Master",
        "unknown replica type for MPIJob; expected one of ['Launcher', 'Worker']",
    ),
    (
        "invalid mpiImplementation",
        _set("spec.mpiImplementation", "OpenMPI5"),
        "spec.mpiImplementation",
        "'OpenMPI5' is not one of ['Intel', 'MPICH', 'OpenMPI']",
    ),
    (
        "invalid launcherCreationPolicy",
        _set("spec.launcherCreationPolicy", "WhenReady"),
        "spec.launcherCreationPolicy",
        "'WhenReady' is not one of ['AtStartup', 'WaitForWorkersReady']",
    ),
    ("zero slots per worker", _set("spec.slotsPerWorker", 0), "spec.slotsPerWorker", "must be at least 1, got 0"),
    (
        "invalid cleanPodPolicy",
        _set("spec.runPolicy.cleanPodPolicy", "Completed"),
        "spec.runPolicy.cleanPodPolicy",
        "'Completed' is not one of ['All', 'None', 'Running']",
    ),
    (
        "negative ttl",
        _set("spec.runPolicy.ttlSecondsAfterFinished", -60),
        "spec.runPolicy.ttlSecondsAfterFinished",
        "must be at least 0, got -60",
    ),
    (
        "elastic MPIJob",
        _set("spec.elasticPolicy", {"minReplicas": 1}),
        "spec.elasticPolicy",
        "MPIJob does not support elastic training",
    ),
    (
        "unnamed container",
        lambda m: container(m, "Worker", "mpiReplicaSpecs").pop("name"),
        "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].name",
        "is required",
    ),
]


@pytest.mark.parametrize(("story", "mutate", "field", "message"), MPI_RULES, ids=[rule[0] for rule in MPI_RULES])
def test_each_mpijob_rule_names_the_field_and_explains(load_yaml, story, mutate, field, message):
    manifest = load_yaml("manifests/mpijob.yaml")
    mutate(manifest)

    with pytest.raises(InvalidJobSpecError) as excinfo:
        validate_manifest(MPI, manifest)

    assert excinfo.value.field == field
    assert message in excinfo.value.problem


def test_an_mpijob_does_not_need_a_container_named_mpi(load_yaml):
    manifest = load_yaml("manifests/mpijob.yaml")
    assert container(manifest, "Launcher", "mpiReplicaSpecs")["name"] == "mpi-launcher"
    validate_manifest(MPI, manifest)


def test_a_tfjob_chief_must_be_single(load_yaml):
    manifest = load_yaml("manifests/tfjob.yaml")
    manifest["spec"]["tfReplicaSpecs"]["Chief"] = {
        "replicas": 2,
        "template": {"spec": {"containers": [{"name": "tensorflow", "image": "kubeflow/tf-dist-mnist-test:latest"}]}},
    }

    with pytest.raises(InvalidJobSpecError) as excinfo:
        validate_manifest(TF, manifest)
    assert excinfo.value.field == "spec.tfReplicaSpecs.Chief.replicas"


def test_the_error_is_a_value_error_and_a_provider_error(load_yaml):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    manifest["metadata"]["name"] = "Bad_Name"

    with pytest.raises(ValueError) as excinfo:
        validate_manifest(PYTORCH, manifest)
    assert isinstance(excinfo.value, TrainingJobError)


def test_validation_reports_the_spec_before_the_name(load_yaml):
    # Both are wrong; the structural problem comes first.
    manifest = load_yaml("manifests/pytorchjob.yaml")
    manifest["metadata"]["name"] = "Bad_Name"
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2

    with pytest.raises(InvalidJobSpecError) as excinfo:
        validate_manifest(PYTORCH, manifest)
    assert excinfo.value.field == f"{MASTER}.replicas"


def test_validate_name_alone(load_yaml):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    validate_name(PYTORCH, manifest)
    manifest["metadata"]["name"] = "x" * 64
    with pytest.raises(InvalidJobSpecError, match="is not a DNS-1035 label"):
        validate_name(PYTORCH, manifest)


# -- max_job_name_length ----------------------------------------------------------------------------


def test_max_name_length_leaves_room_for_master_0_and_worker_0(load_yaml):
    # "-master-0" and "-worker-0" are both 9 characters.
    assert max_job_name_length(PYTORCH, load_yaml("manifests/pytorchjob.yaml")) == 54


@pytest.mark.parametrize(("workers", "limit"), [(1, 54), (10, 54), (11, 53), (100, 53), (101, 52)])
def test_max_name_length_shrinks_with_the_highest_worker_index(load_yaml, workers, limit):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    assert max_job_name_length(PYTORCH, manifest) == limit


@pytest.mark.parametrize(("max_replicas", "limit"), [(3, 54), (10, 54), (12, 53)])
def test_max_name_length_of_an_elastic_job_uses_max_replicas(load_yaml, max_replicas, limit):
    manifest = load_yaml("manifests/pytorchjob-elastic.yaml")
    manifest["spec"]["elasticPolicy"]["maxReplicas"] = max_replicas
    assert max_job_name_length(PYTORCH, manifest) == limit


def test_a_name_that_fits_the_current_workers_but_not_the_elastic_maximum_is_refused(load_yaml):
    manifest = load_yaml("manifests/pytorchjob-elastic.yaml")
    manifest["spec"]["elasticPolicy"]["maxReplicas"] = 12
    manifest["metadata"]["name"] = "e" * 54

    with pytest.raises(InvalidJobSpecError, match="at most 53 fit") as excinfo:
        validate_manifest(PYTORCH, manifest)
    assert excinfo.value.field == "metadata.name"


def test_max_name_length_of_an_mpijob_leaves_room_for_the_launcher(load_yaml):
    # "-launcher-0" (11 characters) is longer than "-worker-1".
    assert max_job_name_length(MPI, load_yaml("manifests/mpijob.yaml")) == 52


def test_max_name_length_of_a_tfjob_with_an_evaluator(load_yaml):
    manifest = load_yaml("manifests/tfjob.yaml")
    manifest["spec"]["tfReplicaSpecs"]["Evaluator"] = {"replicas": 1}
    assert max_job_name_length(TF, manifest) == 63 - len("-evaluator-0")


def test_max_name_length_without_replicas_is_the_dns_limit():
    assert max_job_name_length(PYTORCH, {"spec": {}}) == 63


def test_replica_counts_default_to_one_and_grow_to_the_elastic_maximum(load_yaml):
    manifest = load_yaml("manifests/pytorchjob-elastic.yaml")
    manifest["spec"]["pytorchReplicaSpecs"]["Master"] = {"template": {}}

    assert replica_counts(PYTORCH, manifest) == {"Master": 1, "Worker": 3}


def test_replica_counts_ignore_elastic_policy_for_kinds_without_it(load_yaml):
    manifest = load_yaml("manifests/tfjob.yaml")
    manifest["spec"]["elasticPolicy"] = {"maxReplicas": 50}
    assert replica_counts(TF, manifest) == {"PS": 2, "Worker": 4}


def test_replica_counts_skip_counts_that_are_not_integers(load_yaml):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "{{ params.workers }}"
    assert replica_counts(PYTORCH, manifest) == {"Master": 1}
