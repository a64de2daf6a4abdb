"""Bad input, as new users write it, fails with an error naming the field before anything is sent.

Each row builds an operator (parameters, a manifest, or both) and runs it against the in-memory hook:
the error must name the field (``InvalidJobSpecError.field``, or the ``field:`` prefix of the
``ValueError`` a constructor raises) and the hook must have received no call at all. The look-alikes
at the end are valid and must be submitted.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JOB_KINDS
from airflow_provider_disttrain.operators.manage import (
    DeleteTrainingJobOperator,
    ResumeTrainingJobOperator,
    ScaleTrainingJobOperator,
    SuspendTrainingJobOperator,
)
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.operators.train_job import TrainJobOperator
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import MPIOptions, PodOptions, PyTorchOptions, RunPolicy
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from tests.unit.conftest import read_yaml
from tests.unit.fakes import FakeTrainingJobHook, make_context, with_hook

_LEADERS = {
    "PyTorchJob": "Master",
    "MPIJob": "Launcher",
    "TFJob": "Chief",
    "XGBoostJob": "Master",
    "PaddleJob": "Master",
}


def manifest(kind: str, workers: int = 2) -> dict[str, Any]:
    """A valid manifest of ``kind``: its leader (if any) and ``workers`` workers, one named container each."""
    job_kind = JOB_KINDS[kind]
    replicas = {_LEADERS[kind]: 1} if kind in _LEADERS else {}
    replicas["Worker"] = workers
    return {
        "apiVersion": job_kind.resource.api_version,
        "kind": kind,
        "metadata": {"name": "train"},
        "spec": {
            job_kind.replica_specs_key: {
                replica: {
                    "replicas": count,
                    "template": {"spec": {"containers": [{"name": job_kind.container_name, "image": "trainer:1"}]}},
                }
                for replica, count in replicas.items()
            }
        },
    }


def changed(kind: str, change: Callable[[dict[str, Any]], Any], workers: int = 2) -> dict[str, Any]:
    job = manifest(kind, workers)
    change(job)
    return job


def pod(job: dict[str, Any], replica: str = "Worker") -> dict[str, Any]:
    kind = JOB_KINDS[job["kind"]]
    return job["spec"][kind.replica_specs_key][replica]["template"]["spec"]


def main(job: dict[str, Any], replica: str = "Worker") -> dict[str, Any]:
    return pod(job, replica)["containers"][0]


def specs(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"][JOB_KINDS[job["kind"]].replica_specs_key]


def path(kind: str, replica: str = "Worker") -> str:
    job_kind = JOB_KINDS[kind]
    return f"spec.{job_kind.replica_specs_key}.{replica}.template.spec"


def container_path(kind: str, replica: str = "Worker") -> str:
    return f"{path(kind, replica)}.containers[{JOB_KINDS[kind].container_name}]"


PT, MPI, TF, XGB, PADDLE, JAX = "PyTorchJob", "MPIJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob"
TJ = "TrainJob"


def train_job(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """Kubeflow's multi-node example TrainJob, changed."""
    job = read_yaml("manifests/trainjob.yaml")
    change(job)
    return job


def hook_with_runtimes() -> FakeTrainingJobHook:
    hook = FakeTrainingJobHook(namespace="ml")
    hook.runtimes[("ClusterTrainingRuntime", "torch-distributed", "")] = read_yaml("runtimes/torch-distributed.yaml")
    return hook


GROUPED = {
    "pod_options": PodOptions,
    "run_policy": RunPolicy,
    "pytorch_options": PyTorchOptions,
    "mpi_options": MPIOptions,
}


def operator(kind: str, **kwargs: Any) -> TrainingJobOperator:
    """The kind's operator; a grouped parameter given as a dict of its fields is made here, inside the
    test's ``raises`` (a ``PodOptions`` checks itself when it is made)."""
    kwargs = {key: GROUPED[key](**value) if key in GROUPED else value for key, value in kwargs.items()}
    # Not waiting: an input that is wrongly accepted fails the test at once instead of polling.
    arguments: dict[str, Any] = {"task_id": "train", "wait_for_completion": False}
    if kind == TJ:
        if "job_manifest" not in kwargs:
            arguments.update(runtime="torch-distributed", image="trainer:1", num_nodes=2)
        arguments.update(kwargs)
        return TrainJobOperator(**arguments)
    if "job_manifest" not in kwargs:
        arguments.update(image="trainer:1", num_workers=2)
    arguments.update(kwargs)
    if kind == PT:
        return PyTorchJobOperator(**arguments)
    if kind == MPI:
        return MPIJobOperator(**arguments)
    return TrainingJobOperator(kind=kind, **arguments)


# (story, operator kind, operator arguments, the field the error names)
BAD_INPUTS: list[tuple[str, str, dict[str, Any], str]] = [
    # -- quantities: shm_size and resources, as parameters ------------------------------------------
    ("shm_size in bytes units docker style", PT, {"pod_options": {"shm_size": "16GB"}}, "pod_options.shm_size"),
    ("shm_size in lower case", PT, {"pod_options": {"shm_size": "16gi"}}, "pod_options.shm_size"),
    ("shm_size with a space", PADDLE, {"pod_options": {"shm_size": "8 Gi"}}, "pod_options.shm_size"),
    ("shm_size negative", XGB, {"pod_options": {"shm_size": "-1Gi"}}, "pod_options.shm_size"),
    ("shm_size not a string or number", PT, {"pod_options": {"shm_size": ["16Gi"]}}, "pod_options.shm_size"),
    ("memory in GB", PT, {"replica_resources": {"limits": {"memory": "8GB"}}}, "replica_resources.limits.memory"),
    ("cpu spelled out", TF, {"replica_resources": {"limits": {"cpu": "two"}}}, "replica_resources.limits.cpu"),
    ("cpu negative", JAX, {"replica_resources": {"requests": {"cpu": -1}}}, "replica_resources.requests.cpu"),
    (
        "memory request above limit",
        PT,
        {"replica_resources": {"requests": {"memory": "16Gi"}, "limits": {"memory": "8Gi"}}},
        "replica_resources.requests.memory",
    ),
    (
        "cpu request above limit",
        MPI,
        {"replica_resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "2000m"}}},
        "replica_resources.requests.cpu",
    ),
    (
        "misspelt resource name",
        PT,
        {"replica_resources": {"limits": {"memroy": "8Gi"}}},
        "replica_resources.limits.memroy",
    ),
    ("gpu without its domain", XGB, {"replica_resources": {"limits": {"gpu": 1}}}, "replica_resources.limits.gpu"),
    (
        "fractional gpu",
        PT,
        {"replica_resources": {"limits": {"nvidia.com/gpu": 0.5}}},
        "replica_resources.limits.nvidia.com/gpu",
    ),
    (
        "gpu request without limit",
        TF,
        {"replica_resources": {"requests": {"nvidia.com/gpu": 1}}},
        "replica_resources.limits.nvidia.com/gpu",
    ),
    (
        "gpu request below limit",
        PT,
        {"replica_resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}},
        "replica_resources.requests.nvidia.com/gpu",
    ),
    (
        "per-replica memory malformed",
        PT,
        {"replica_resources": {"Worker": {"limits": {"memory": "1 Gi"}}}},
        "replica_resources.Worker.limits.memory",
    ),
    (
        "resources for a replica the kind lacks",
        JAX,
        {"replica_resources": {"Master": {"limits": {"cpu": "1"}}}},
        "replica_resources.Master",
    ),
    (
        "resources for a misspelt replica",
        PT,
        {"replica_resources": {"Workers": {"limits": {"cpu": "1"}}}},
        "replica_resources.Workers",
    ),
    (
        "mpi worker memory malformed",
        MPI,
        {"replica_resources": {"Worker": {"limits": {"memory": "4gb"}}}},
        "replica_resources.Worker.limits.memory",
    ),
    (
        "mpi launcher cpu above limit",
        MPI,
        {"replica_resources": {"Launcher": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}},
        "replica_resources.Launcher.requests.cpu",
    ),
    ("gpus_per_replica negative", PT, {"gpus_per_replica": -1}, "gpus_per_replica"),
    (
        "elastic maxReplicas of a billion",
        PT,
        {"job_manifest": changed(PT, lambda m: m["spec"].update(elasticPolicy={"maxReplicas": 10**9}))},
        "spec.elasticPolicy.maxReplicas",
    ),
    ("gpus_per_replica beyond any node", PT, {"gpus_per_replica": 65}, "gpus_per_replica"),
    ("num_workers of a billion", MPI, {"num_workers": 10**9}, "num_workers"),
    ("num_nodes of a billion", TJ, {"num_nodes": 10**9}, "num_nodes"),
    ("gpus_per_node beyond any node", TJ, {"gpus_per_node": 1000}, "gpus_per_node"),
    (
        "manifest replicas of a billion",
        TF,
        {"job_manifest": changed(TF, lambda m: specs(m)["Worker"].update(replicas=10**9))},
        "spec.tfReplicaSpecs.Worker.replicas",
    ),
    (
        "manifest gpu limit beyond any node",
        XGB,
        {"job_manifest": changed(XGB, lambda m: main(m).update(resources={"limits": {"nvidia.com/gpu": "1k"}}))},
        "spec.xgbReplicaSpecs.Worker.template.spec.containers[xgboost].resources.limits.nvidia.com/gpu",
    ),
    # -- environment variables -------------------------------------------------------------------------
    ("env name with '='", PT, {"env": {"MODE=fast": "1"}}, "env.MODE=fast"),
    ("env name empty", TF, {"env": {"": "1"}}, "env."),
    ("env name non-ASCII", XGB, {"env": {"GRÖSSE": "1"}}, "env.GRÖSSE"),
    ("env docker style without '='", PT, {"env": ["EPOCHS=3", "DEBUG"]}, "env[1]"),
    ("env docker style empty name", PADDLE, {"env": ["=3"]}, "env[0]"),
    ("env as one string", PT, {"env": "EPOCHS=3"}, "env"),
    ("env entry without a name", MPI, {"env": [{"value": "1"}]}, "env[0]"),
    ("env entry neither string nor mapping", JAX, {"env": [("EPOCHS", "3")]}, "env[0]"),
    ("env value an int", PT, {"env": {"EPOCHS": 3}}, "env.EPOCHS"),
    ("env value a bool", TF, {"env": {"DEBUG": True}}, "env.DEBUG"),
    ("env value a float", TJ, {"env": {"LR": 1e-5}}, "env.LR"),
    ("env EnvVar value an int", MPI, {"env": [{"name": "EPOCHS", "value": 3}]}, "env[0].value"),
    (
        "manifest env value an int",
        PADDLE,
        {"job_manifest": changed(PADDLE, lambda m: main(m).update(env=[{"name": "EPOCHS", "value": 3}]))},
        "spec.paddleReplicaSpecs.Worker.template.spec.containers[paddle].env[0].value",
    ),
    # -- namespaces -------------------------------------------------------------------------------------
    ("namespace with an underscore", PT, {"namespace": "ml_team"}, "namespace"),
    ("namespace in upper case", MPI, {"namespace": "ML"}, "namespace"),
    ("namespace with a dot", TF, {"namespace": "team.ml"}, "namespace"),
    ("namespace too long", XGB, {"namespace": "n" * 64}, "namespace"),
    (
        "manifest namespace invalid",
        PT,
        {"job_manifest": changed(PT, lambda m: m["metadata"].update(namespace="Team_A"))},
        "metadata.namespace",
    ),
    # -- log_replicas -----------------------------------------------------------------------------------
    ("log a worker beyond the count", PT, {"log_replicas": ["worker-2"]}, "log_replicas"),
    ("log a replica type the kind lacks", PT, {"log_replicas": ["chief-0"]}, "log_replicas"),
    ("log a second master", XGB, {"log_replicas": ["master-1"]}, "log_replicas"),
    ("log the mpi launcher by index", MPI, {"log_replicas": ["launcher-0"]}, "log_replicas"),
    ("log a jax master", JAX, {"log_replicas": ["master"]}, "log_replicas"),
    ("log_replicas misspelt keyword", PT, {"log_replicas": "leaders"}, "log_replicas"),
    ("log a manifest's missing PS", TF, {"job_manifest": manifest(TF), "log_replicas": ["ps-0"]}, "log_replicas"),
    # -- a manifest of another kind ------------------------------------------------------------------
    ("an MPIJob given to the PyTorchJob operator", PT, {"job_manifest": manifest(MPI)}, "kind"),
    ("a PyTorchJob given to the MPIJob operator", MPI, {"job_manifest": manifest(PT)}, "kind"),
    ("a TFJob given as an XGBoostJob", XGB, {"job_manifest": manifest(TF)}, "kind"),
    (
        "a Deployment",
        PT,
        {"job_manifest": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {}}},
        "kind",
    ),
    (
        "a PyTorchJob of a wrong version",
        PT,
        {"job_manifest": changed(PT, lambda m: m.update(apiVersion="kubeflow.org/v2"))},
        "apiVersion",
    ),
    # -- pod rules in manifests, every kind -----------------------------------------------------------
    (
        "env name with '=' in a manifest",
        XGB,
        {"job_manifest": changed(XGB, lambda m: main(m).update(env=[{"name": "A=B", "value": "1"}]))},
        f"{container_path(XGB)}.env[0].name",
    ),
    (
        "env as strings inside a manifest",
        TF,
        {"job_manifest": changed(TF, lambda m: main(m).update(env=["A=1"]))},
        f"{container_path(TF)}.env",
    ),
    (
        "request above limit in a manifest",
        PADDLE,
        {
            "job_manifest": changed(
                PADDLE, lambda m: main(m).update(resources={"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}})
            )
        },
        f"{container_path(PADDLE)}.resources.requests.memory",
    ),
    (
        "malformed sizeLimit in a manifest",
        JAX,
        {
            "job_manifest": changed(
                JAX,
                lambda m: pod(m).update(
                    volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1 G"}}]
                ),
            )
        },
        f"{path(JAX)}.volumes[dshm].emptyDir.sizeLimit",
    ),
    (
        "launcher gpu fractional in a manifest",
        MPI,
        {
            "job_manifest": changed(
                MPI, lambda m: main(m, "Launcher").update(resources={"limits": {"nvidia.com/gpu": "1.5"}})
            )
        },
        "spec.mpiReplicaSpecs.Launcher.template.spec.containers[mpi].resources.limits.nvidia.com/gpu",
    ),
    (
        "a sidecar named in upper case",
        TF,
        {"job_manifest": changed(TF, lambda m: pod(m)["containers"].append({"name": "Sidecar_1", "image": "s:1"}))},
        f"{path(TF)}.containers[Sidecar_1].name",
    ),
    (
        "a mount of a volume the pod lacks",
        PT,
        {"job_manifest": changed(PT, lambda m: main(m).update(volumeMounts=[{"name": "data", "mountPath": "/data"}]))},
        f"{container_path(PT)}.volumeMounts[data]",
    ),
    (
        "init container env name empty",
        PT,
        {
            "job_manifest": changed(
                PT, lambda m: pod(m).update(initContainers=[{"name": "fetch", "image": "f:1", "env": [{"name": ""}]}])
            )
        },
        f"{path(PT)}.initContainers[fetch].env[0].name",
    ),
    (
        "hugepages without cpu or memory",
        PT,
        {"job_manifest": changed(PT, lambda m: main(m).update(resources={"limits": {"hugepages-2Mi": "4Mi"}}))},
        f"{container_path(PT)}.resources",
    ),
    (
        "limits written as a list",
        XGB,
        {"job_manifest": changed(XGB, lambda m: main(m).update(resources={"limits": ["cpu=1"]}))},
        f"{container_path(XGB)}.resources.limits",
    ),
    # -- replica types ------------------------------------------------------------------------------------
    (
        "a TFJob with both Chief and Master",
        TF,
        {"job_manifest": changed(TF, lambda m: specs(m).update(Master=copy.deepcopy(specs(m)["Chief"])))},
        "spec.tfReplicaSpecs",
    ),
    (
        "a TFJob with two Masters",
        TF,
        {"job_manifest": changed(TF, lambda m: specs(m).update(Master=dict(specs(m).pop("Chief"), replicas=2)))},
        "spec.tfReplicaSpecs.Master.replicas",
    ),
    (
        "an MPIJob launcher in lower case",
        MPI,
        {"job_manifest": changed(MPI, lambda m: specs(m).update(launcher=specs(m).pop("Launcher")))},
        "spec.mpiReplicaSpecs.launcher",
    ),
    (
        "a PyTorchJob worker given twice",
        PT,
        {"job_manifest": changed(PT, lambda m: specs(m).update(worker=copy.deepcopy(specs(m)["Worker"])))},
        "spec.pytorchReplicaSpecs.worker",
    ),
    # -- other parameters -----------------------------------------------------------------------------
    ("job name with an underscore", PT, {"job_name": "train_1"}, "metadata.name"),
    ("no workers", PT, {"num_workers": 0}, "num_workers"),
    ("if_exists misspelt", TF, {"job_name": "t", "if_exists": "overwrite"}, "if_exists"),
    (
        "clean pod policy in lower case",
        PT,
        {"run_policy": {"clean_pod_policy": "all"}},
        "spec.runPolicy.cleanPodPolicy",
    ),
    (
        "elastic range inverted",
        PT,
        {"pytorch_options": {"elastic_policy": {"min_replicas": 4, "max_replicas": 2}}},
        "spec.elasticPolicy.minReplicas",
    ),
    (
        "mpi implementation in lower case",
        MPI,
        {"mpi_options": {"mpi_implementation": "openmpi"}},
        "mpi_options.mpi_implementation",
    ),
    # -- TrainJob: its own parameters, and Kubeflow's example manifest changed ----------------------
    ("no nodes", TJ, {"num_nodes": 0}, "num_nodes"),
    ("gpus per node negative", TJ, {"gpus_per_node": -1}, "gpus_per_node"),
    (
        "node memory in GB",
        TJ,
        {"resources_per_node": {"limits": {"memory": "8GB"}}},
        "resources_per_node.limits.memory",
    ),
    ("runtime kind in lower case", TJ, {"runtime_kind": "clustertrainingruntime"}, "runtime_kind"),
    ("no runtime", TJ, {"runtime": None}, "spec.runtimeRef"),
    ("dataset uri without a scheme", TJ, {"dataset_uri": "tatsu-lab/alpaca"}, "spec.initializer.dataset.storageUri"),
    ("blank image", TJ, {"image": " "}, "spec.trainer.image"),
    ("env entry without a name", TJ, {"env": [{"value": "1"}]}, "env[0]"),
    ("trainjob in an invalid namespace", TJ, {"namespace": "ML"}, "namespace"),
    ("log a worker of a TrainJob", TJ, {"log_replicas": ["worker-0"]}, "log_replicas"),
    (
        "manifest with zero nodes",
        TJ,
        {"job_manifest": train_job(lambda j: j["spec"]["trainer"].update(numNodes=0))},
        "spec.trainer.numNodes",
    ),
    (
        "manifest naming a runtime kind that does not exist",
        TJ,
        {"job_manifest": train_job(lambda j: j["spec"]["runtimeRef"].update(kind="Runtime"))},
        "spec.runtimeRef.kind",
    ),
    (
        "manifest with a runtime patch manager that is no domain path",
        TJ,
        {"job_manifest": train_job(lambda j: j["spec"].update(runtimePatches=[{"manager": "platform"}]))},
        "spec.runtimePatches[0].manager",
    ),
]


def test_the_table_covers_every_kind_and_enough_mistakes():
    assert len(BAD_INPUTS) >= 50
    assert {kind for _, kind, _, _ in BAD_INPUTS} == set(JOB_KINDS)


@pytest.mark.parametrize(("story", "kind", "arguments", "field"), BAD_INPUTS, ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_names_its_field_before_anything_is_sent(story, kind, arguments, field):
    hook = FakeTrainingJobHook(namespace="ml")

    with pytest.raises(ValueError) as raised:
        with_hook(operator(kind, **copy.deepcopy(arguments)), hook).execute(make_context())

    if isinstance(raised.value, InvalidJobSpecError):
        assert raised.value.field == field
    assert str(raised.value).startswith(f"{field}: "), str(raised.value)
    assert hook.api_calls() == []


def test_a_manifest_of_another_kind_is_named_by_its_kind():
    hook = FakeTrainingJobHook()

    with pytest.raises(InvalidJobSpecError) as raised:
        with_hook(operator(PT, job_manifest=manifest(MPI)), hook).execute(make_context())

    assert "MPIJob" in raised.value.problem
    assert "TrainingJobOperator(kind='MPIJob')" in raised.value.problem


# -- valid look-alikes are submitted ------------------------------------------------------------------

GOOD_INPUTS: list[tuple[str, str, dict[str, Any]]] = [
    ("shm_size in Gi", PT, {"pod_options": {"shm_size": "16Gi"}}),
    ("shm_size in decimal units and fractions", TF, {"pod_options": {"shm_size": "1.5G"}}),
    ("shm_size as an exponent", XGB, {"pod_options": {"shm_size": "1e9"}}),
    (
        "cpu in millicores, memory request below limit",
        PT,
        {"replica_resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": 2, "memory": "2Gi"}}},
    ),
    (
        "gpu request equal to limit",
        MPI,
        {"replica_resources": {"Worker": {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": "2"}}}},
    ),
    ("per-replica resources in lower case", PT, {"replica_resources": {"worker": {"limits": {"memory": "4Gi"}}}}),
    ("env docker style, value holding '='", PT, {"env": ["EPOCHS=3", "FLAGS=--lr=0.1", "EMPTY="]}),
    ("the most GPUs and workers allowed", PT, {"gpus_per_replica": 64, "num_workers": 10_000}),
    ("env names with dots and dashes", PADDLE, {"env": {"my.env-name": "1", "MyEnvName1": "2"}}),
    (
        "env mixing strings and EnvVar mappings",
        JAX,
        {"env": ["A=1", {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
    ),
    ("namespace with digits and dashes", PT, {"namespace": "ml-team-2"}),
    ("log named replicas", PT, {"log_replicas": ["master-0", "worker-1", "worker"]}),
    ("log the mpi launcher and a worker", MPI, {"log_replicas": ["launcher", "worker-1"]}),
    ("log a TrainJob's second node", TJ, {"log_replicas": ["node-1"]}),
    ("a TrainJob as Kubeflow's example writes it", TJ, {"job_manifest": read_yaml("manifests/trainjob.yaml")}),
    (
        "a TFJob with a Master",
        TF,
        {"job_manifest": changed(TF, lambda m: specs(m).update(Master=specs(m).pop("Chief")))},
    ),
    (
        "a PyTorchJob in lower case",
        PT,
        {
            "job_manifest": changed(
                PT, lambda m: specs(m).update(master=specs(m).pop("Master"), worker=specs(m).pop("Worker"))
            )
        },
    ),
]


@pytest.mark.parametrize(("story", "kind", "arguments"), GOOD_INPUTS, ids=[row[0] for row in GOOD_INPUTS])
def test_valid_look_alikes_are_submitted(story, kind, arguments):
    hook = hook_with_runtimes()

    with_hook(operator(kind, **copy.deepcopy(arguments)), hook).execute(make_context())

    assert hook.called("create_job")


def test_docker_style_env_becomes_env_vars():
    hook = FakeTrainingJobHook()

    with_hook(operator(PT, env=["EPOCHS=3", "FLAGS=--lr=0.1"]), hook).execute(make_context())

    env = main(hook.submitted_manifest())["env"]
    assert env == [{"name": "EPOCHS", "value": "3"}, {"name": "FLAGS", "value": "--lr=0.1"}]


def test_per_replica_resources_written_in_lower_case_reach_their_replica():
    hook = FakeTrainingJobHook()

    with_hook(operator(PT, replica_resources={"worker": {"limits": {"memory": "4Gi"}}}), hook).execute(make_context())

    submitted = hook.submitted_manifest()
    assert main(submitted)["resources"] == {"limits": {"memory": "4Gi"}}
    assert "resources" not in main(submitted, "Master")


# -- operators on an existing job, and the sensor ---------------------------------------------------


@pytest.mark.parametrize(
    ("operator_class", "arguments"),
    [
        (DeleteTrainingJobOperator, {}),
        (ScaleTrainingJobOperator, {"replicas": 2}),
        (SuspendTrainingJobOperator, {}),
        (ResumeTrainingJobOperator, {}),
    ],
)
@pytest.mark.parametrize("namespace", ["ML_team", "team.ml"])
def test_an_invalid_namespace_of_an_existing_job_is_named_before_any_request(operator_class, arguments, namespace):
    hook = FakeTrainingJobHook()
    task = with_hook(operator_class(task_id="manage", job_name="train", namespace=namespace, **arguments), hook)

    with pytest.raises(InvalidJobSpecError) as raised:
        task.execute(make_context())

    assert raised.value.field == "namespace"
    assert hook.api_calls() == []


def test_an_invalid_namespace_of_the_sensor_is_named_before_any_request():
    hook = FakeTrainingJobHook()
    sensor = with_hook(TrainingJobSensor(task_id="wait", job_name="train", namespace="ML_team"), hook)

    with pytest.raises(InvalidJobSpecError) as raised:
        sensor.poke(make_context())

    assert raised.value.field == "namespace"
    assert hook.api_calls() == []
