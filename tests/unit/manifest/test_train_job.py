"""Building a TrainJob from parameters, and over Kubeflow's own example manifests."""

from __future__ import annotations

from airflow_provider_disttrain.manifest.train_job import PATCH_MANAGER, TrainJobParameters, build_train_job
from airflow_provider_disttrain.manifest.train_job_validation import validate_train_job


def _named(manifest, name="tj-1", namespace="ml"):
    manifest["metadata"].update(name=name, namespace=namespace)
    return manifest


def test_from_parameters_only():
    manifest = build_train_job(
        None,
        TrainJobParameters(
            runtime="torch-distributed",
            image="pytorch/pytorch:2.13.0",
            command=["torchrun", "train.py"],
            args=["--epochs", "3"],
            env={"NCCL_DEBUG": "INFO"},
            num_nodes=4,
            resources_per_node={"requests": {"cpu": "4", "memory": "16Gi"}},
            gpus_per_node=2,
            dataset_uri="hf://tatsu-lab/alpaca",
            model_uri="hf://meta-llama/Llama-3.2-1B-Instruct",
            active_deadline_seconds=3600,
        ),
    )

    assert manifest == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {},
        "spec": {
            "runtimeRef": {
                "name": "torch-distributed",
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
            },
            "trainer": {
                "image": "pytorch/pytorch:2.13.0",
                "command": ["torchrun", "train.py"],
                "args": ["--epochs", "3"],
                "numNodes": 4,
                "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                "resourcesPerNode": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": 2}},
            },
            "initializer": {
                "dataset": {"storageUri": "hf://tatsu-lab/alpaca"},
                "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct"},
            },
            "activeDeadlineSeconds": 3600,
        },
    }
    validate_train_job(_named(manifest))


def test_a_namespaced_runtime():
    manifest = build_train_job(None, TrainJobParameters(runtime="my-runtime", runtime_kind="TrainingRuntime"))
    assert manifest["spec"]["runtimeRef"] == {
        "name": "my-runtime",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
    }


def test_parameters_win_over_kubeflow_s_example_and_keep_the_rest(load_yaml):
    example = load_yaml("manifests/trainjob-runtime-patches.yaml")
    manifest = build_train_job(
        example,
        TrainJobParameters(
            num_nodes=4, env=["CUSTOM_VAR=from-airflow", "EXTRA=1"], resources_per_node={"limits": {"cpu": "8"}}
        ),
    )
    trainer = manifest["spec"]["trainer"]

    assert trainer["numNodes"] == 4
    assert trainer["command"] == example["spec"]["trainer"]["command"]
    assert trainer["env"] == [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "CUSTOM_VAR", "value": "from-airflow"},
        {"name": "EXTRA", "value": "1"},
    ]
    # Deep-merged: the example's requests and memory limit stay.
    assert trainer["resourcesPerNode"] == {
        "requests": {"cpu": "2", "memory": "4Gi"},
        "limits": {"cpu": "8", "memory": "8Gi"},
    }
    assert manifest["spec"]["runtimeRef"] == example["spec"]["runtimeRef"]
    assert manifest["spec"]["runtimePatches"] == example["spec"]["runtimePatches"]
    assert example["spec"]["trainer"]["numNodes"] == 2  # the base is not modified


def test_nothing_given_leaves_the_example_as_it_is(load_yaml):
    example = load_yaml("manifests/trainjob.yaml")
    assert build_train_job(example, TrainJobParameters()) == example


def test_labels_and_annotations_go_on_the_job_and_through_a_runtime_patch_on_the_trainer_pods():
    manifest = build_train_job(
        None,
        TrainJobParameters(
            runtime="torch-distributed", labels={"team": "ml"}, annotations={"disttrain.test/exit-code": "1"}
        ),
    )

    assert manifest["metadata"] == {"labels": {"team": "ml"}, "annotations": {"disttrain.test/exit-code": "1"}}
    assert manifest["spec"]["runtimePatches"] == [
        {
            "manager": PATCH_MANAGER,
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {
                                        "template": {
                                            "metadata": {
                                                "labels": {"team": "ml"},
                                                "annotations": {"disttrain.test/exit-code": "1"},
                                            }
                                        }
                                    }
                                },
                            }
                        ]
                    }
                }
            },
        }
    ]


def test_the_provider_s_runtime_patch_is_replaced_and_the_user_s_kept(load_yaml):
    example = load_yaml("manifests/trainjob-runtime-patches.yaml")
    once = build_train_job(example, TrainJobParameters(labels={"a": "1"}))
    twice = build_train_job(once, TrainJobParameters(labels={"a": "2"}))

    managers = [patch["manager"] for patch in twice["spec"]["runtimePatches"]]
    assert managers == ["example.io/platform-team", PATCH_MANAGER]
    pod_labels = twice["spec"]["runtimePatches"][1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert pod_labels["template"]["spec"]["template"]["metadata"] == {"labels": {"a": "2"}}


def test_a_malformed_base_is_left_for_validation_to_name():
    manifest = build_train_job(
        {"kind": "TrainJob", "spec": {"runtimePatches": "oops"}}, TrainJobParameters(labels={"a": "b"})
    )
    assert manifest["spec"]["runtimePatches"] == "oops"
