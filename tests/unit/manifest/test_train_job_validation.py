"""TrainJob checks before sending: each malformed field is named; Kubeflow's examples pass."""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.manifest.train_job_validation import (
    check_against_runtime,
    name_room,
    runtime_steps,
    validate_train_job,
)


@pytest.fixture
def train_job(load_yaml):
    job = load_yaml("manifests/trainjob.yaml")
    job["metadata"]["namespace"] = "ml"
    return job


@pytest.mark.parametrize("fixture", ["manifests/trainjob.yaml", "manifests/trainjob-runtime-patches.yaml"])
def test_kubeflow_s_examples_are_valid(load_yaml, fixture):
    validate_train_job(load_yaml(fixture))


def _set(job, dotted, value):
    target = job
    *parents, last = dotted.split(".")
    for part in parents:
        target = target.setdefault(part, {})
    if value is _DELETE:
        target.pop(last, None)
    else:
        target[last] = value


_DELETE = object()

BAD = [
    ("spec.runtimeRef", _DELETE, "spec.runtimeRef", "must be a mapping"),
    ("spec.runtimeRef.name", "", "spec.runtimeRef.name", "is required"),
    ("spec.runtimeRef.name", "x" * 254, "spec.runtimeRef.name", "at most 253"),
    ("spec.runtimeRef.kind", "Runtime", "spec.runtimeRef.kind", "'Runtime' is not one of"),
    ("spec.runtimeRef.apiGroup", "kubeflow.org", "spec.runtimeRef.apiGroup", "is not 'trainer.kubeflow.org'"),
    ("spec.trainer", ["node"], "spec.trainer", "must be a mapping"),
    ("spec.trainer.numNodes", 0, "spec.trainer.numNodes", "must be at least 1"),
    ("spec.trainer.numNodes", "3", "spec.trainer.numNodes", "must be an integer"),
    ("spec.trainer.numProcPerNode", 0, "spec.trainer.numProcPerNode", "must be at least 1"),
    ("spec.trainer.image", " ", "spec.trainer.image", "non-empty image name"),
    ("spec.trainer.image", "i" * 501, "spec.trainer.image", "at most 500"),
    ("spec.trainer.command", "torchrun train.py", "spec.trainer.command", "must be a list of strings"),
    ("spec.trainer.args", ["--lr", 0.1], "spec.trainer.args", "must be a list of strings"),
    ("spec.trainer.env", [{"name": "A=B", "value": "1"}], "spec.trainer.env[0].name", ""),
    ("spec.trainer.resourcesPerNode", {"limits": {"cpu": "2 cores"}}, "spec.trainer.resourcesPerNode.limits.cpu", ""),
    (
        "spec.trainer.resourcesPerNode",
        {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}},
        "spec.trainer.resourcesPerNode.requests.nvidia.com/gpu",
        "",
    ),
    ("spec.initializer.dataset.storageUri", "tatsu-lab/alpaca", "spec.initializer.dataset.storageUri", "not a URI"),
    ("spec.initializer.model", "hf://x/y", "spec.initializer.model", "must be a mapping"),
    ("spec.runtimePatches", {"manager": "a.io/b"}, "spec.runtimePatches", "must be a list"),
    ("spec.runtimePatches", [{"manager": "platform-team"}], "spec.runtimePatches[0].manager", "domain-prefixed path"),
    ("spec.runtimePatches", [{"manager": "a.io/b"}, {"manager": "a.io/b"}], "spec.runtimePatches[1].manager", "two"),
    ("spec.runtimePatches", [{"manager": f"a.io/{i}"} for i in range(17)], "spec.runtimePatches", "at most 16"),
    (
        "spec.runtimePatches",
        [
            {
                "manager": "a.io/b",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {
                                    "name": "node",
                                    "template": {
                                        "spec": {
                                            "template": {
                                                "spec": {"containers": [{"name": "node", "env": [{"name": "X"}]}]}
                                            }
                                        }
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        ],
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
        ".containers[node].env",
        "spec.trainer.env",
    ),
    ("spec.suspend", "yes", "spec.suspend", "true or false"),
    ("spec.activeDeadlineSeconds", 0, "spec.activeDeadlineSeconds", "at least 1"),
    ("spec.managedBy", "me", "spec.managedBy", "is not one of"),
    ("metadata.name", "Multi_Node", "metadata.name", "DNS-1035"),
    ("metadata.labels", {"team": "ml platform"}, "metadata.labels.team", "not a valid label value"),
    ("metadata.namespace", "ML", "metadata.namespace", "namespace name"),
    ("kind", "PyTorchJob", "kind", "submit it with TrainingJobOperator(kind='PyTorchJob')"),
    ("apiVersion", "kubeflow.org/v1", "apiVersion", "does not match TrainJob"),
]


@pytest.mark.parametrize(
    ("dotted", "value", "field", "problem"), BAD, ids=[f"{row[2]}-{i}" for i, row in enumerate(BAD)]
)
def test_a_malformed_field_is_named(train_job, dotted, value, field, problem):
    _set(train_job, dotted, value)
    with pytest.raises(InvalidJobSpecError) as excinfo:
        validate_train_job(train_job)
    assert excinfo.value.field == field
    assert problem in excinfo.value.problem


def test_a_name_too_long_for_the_nodes_pods_is_refused(train_job):
    # 3 nodes: pods are <name>-node-0-2-xxxxx, 15 characters after the name.
    train_job["metadata"]["name"] = "n" * 49
    with pytest.raises(InvalidJobSpecError) as excinfo:
        validate_train_job(train_job)
    assert excinfo.value.field == "metadata.name"
    assert "at most 48 fit" in excinfo.value.problem
    train_job["metadata"]["name"] = "n" * 48
    validate_train_job(train_job)


def test_an_empty_storage_uri_is_allowed(train_job):
    train_job["spec"]["initializer"] = {"dataset": {"storageUri": ""}}
    validate_train_job(train_job)


# -- against the runtime ------------------------------------------------------------------------------


def test_the_runtime_s_steps_and_pod_counts(load_yaml, train_job):
    assert runtime_steps(load_yaml("runtimes/torch-distributed.yaml"), train_job) == {"node": 3}
    assert runtime_steps(load_yaml("runtimes/torchtune-llama3.2-1b.yaml"), {"spec": {}}) == {
        "dataset-initializer": 1,
        "model-initializer": 1,
        "node": 1,
    }


def test_a_missing_runtime_names_the_parameter(train_job):
    with pytest.raises(InvalidJobSpecError) as excinfo:
        check_against_runtime(train_job, None, {"spec.runtimeRef.name": "runtime"})
    assert excinfo.value.field == "runtime"
    assert excinfo.value.problem == (
        "ClusterTrainingRuntime 'torch-distributed' does not exist (kubectl get clustertrainingruntimes)"
    )


def test_a_missing_namespaced_runtime_says_where_it_was_looked_for(train_job):
    train_job["spec"]["runtimeRef"] = {"name": "mine", "kind": "TrainingRuntime"}
    with pytest.raises(InvalidJobSpecError) as excinfo:
        check_against_runtime(train_job, None)
    assert excinfo.value.field == "spec.runtimeRef.name"
    assert "TrainingRuntime 'mine' does not exist in namespace 'ml'" in excinfo.value.problem


def test_an_initializer_needs_its_step_in_the_runtime(load_yaml, train_job):
    train_job["spec"]["initializer"] = {"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}}
    with pytest.raises(InvalidJobSpecError) as excinfo:
        check_against_runtime(
            train_job, load_yaml("runtimes/torch-distributed.yaml"), {"spec.initializer.dataset": "dataset_uri"}
        )
    assert excinfo.value.field == "dataset_uri"
    assert "has no dataset-initializer step (it has node)" in excinfo.value.problem

    train_job["spec"]["runtimeRef"]["name"] = "torchtune-llama3.2-1b"
    train_job["metadata"]["name"] = "tune"
    check_against_runtime(train_job, load_yaml("runtimes/torchtune-llama3.2-1b.yaml"))


def test_a_runtime_patch_must_name_a_step_of_the_runtime(load_yaml):
    job = load_yaml("manifests/trainjob-runtime-patches.yaml")
    job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["name"] = "worker"
    with pytest.raises(InvalidJobSpecError) as excinfo:
        check_against_runtime(job, load_yaml("runtimes/torch-distributed.yaml"))
    assert excinfo.value.field == ("spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name")
    assert "'worker' is not a step of ClusterTrainingRuntime 'torch-distributed' (node)" in excinfo.value.problem


def test_the_name_must_fit_every_step_of_the_runtime(load_yaml, train_job):
    runtime = load_yaml("runtimes/torchtune-llama3.2-1b.yaml")
    train_job["spec"]["runtimeRef"]["name"] = "torchtune-llama3.2-1b"
    # <name>-dataset-initializer-0-0-xxxxx: 30 characters after the name.
    assert name_room(train_job, runtime) == 33
    assert name_room(train_job, None) == 48
    train_job["metadata"]["name"] = "n" * 34
    with pytest.raises(InvalidJobSpecError) as excinfo:
        check_against_runtime(train_job, runtime)
    assert excinfo.value.field == "metadata.name"
    assert "at most 33 fit" in excinfo.value.problem
