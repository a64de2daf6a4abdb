"""Building a job manifest from operator parameters, alone or merged over a user's manifest."""

from __future__ import annotations

import copy

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import JOB_KINDS, JobKind
from airflow_provider_disttrain.manifest.builder import (
    GPU_RESOURCE,
    SHM_VOLUME,
    JobParameters,
    build_manifest,
    deep_merge,
    set_identity,
)
from airflow_provider_disttrain.manifest.validation import validate_manifest
from airflow_provider_disttrain.parameters import PodOptions, RunPolicy

PYTORCH = JOB_KINDS["PyTorchJob"]
MPI = JOB_KINDS["MPIJob"]
TF = JOB_KINDS["TFJob"]

IMAGE = "ghcr.io/acme/mnist-train:2024.05"
MPI_IMAGE = "mpioperator/mpi-pi:openmpi"


def replicas(kind: JobKind, manifest: dict) -> dict:
    return manifest["spec"][kind.replica_specs_key]


def pod_spec(kind: JobKind, manifest: dict, replica: str) -> dict:
    return replicas(kind, manifest)[replica]["template"]["spec"]


def main_container(kind: JobKind, manifest: dict, replica: str) -> dict:
    containers = pod_spec(kind, manifest, replica)["containers"]
    named = [c for c in containers if c["name"] == kind.container_name]
    return named[0] if named else containers[0]


# -- from parameters alone --------------------------------------------------------------------------

# kind: (replica counts with num_workers=2, container name, ports, restart policy)
FROM_PARAMETERS = {
    "PyTorchJob": (
        {"Master": 1, "Worker": 2},
        "pytorch",
        [{"name": "pytorchjob-port", "containerPort": 23456}],
        "OnFailure",
    ),
    "MPIJob": ({"Launcher": 1, "Worker": 2}, "mpi", None, "Never"),
    "TFJob": ({"Worker": 2}, "tensorflow", [{"name": "tfjob-port", "containerPort": 2222}], "OnFailure"),
    "XGBoostJob": (
        {"Master": 1, "Worker": 2},
        "xgboost",
        [{"name": "xgboostjob-port", "containerPort": 9999}],
        "OnFailure",
    ),
    "PaddleJob": ({"Worker": 2}, "paddle", [{"name": "master", "containerPort": 36543}], "OnFailure"),
    "JAXJob": ({"Worker": 2}, "jax", [{"name": "jaxjob-port", "containerPort": 6666}], "OnFailure"),
}


@pytest.mark.parametrize("name", sorted(FROM_PARAMETERS))
def test_a_job_from_parameters_alone_has_the_kinds_shape(name):
    kind = JOB_KINDS[name]
    counts, container_name, ports, restart_policy = FROM_PARAMETERS[name]

    manifest = build_manifest(kind, None, JobParameters(image=IMAGE, num_workers=2))

    assert manifest["apiVersion"] == kind.resource.api_version
    assert manifest["kind"] == name
    assert {replica: spec["replicas"] for replica, spec in replicas(kind, manifest).items()} == counts
    for replica, spec in replicas(kind, manifest).items():
        assert spec["restartPolicy"] == restart_policy, replica
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == container_name
        assert container["image"] == IMAGE
        assert container.get("ports") == ports


@pytest.mark.parametrize("name", sorted(FROM_PARAMETERS))
def test_a_job_from_parameters_alone_passes_validation_once_named(name):
    kind = JOB_KINDS[name]
    manifest = build_manifest(kind, None, JobParameters(image=IMAGE, command=["python", "train.py"], num_workers=3))

    validate_manifest(kind, set_identity(manifest, "mnist-x7k2p9", "kubeflow", {}))


def test_without_num_workers_a_job_has_one_worker():
    manifest = build_manifest(PYTORCH, None, JobParameters(image=IMAGE))
    assert replicas(PYTORCH, manifest)["Worker"]["replicas"] == 1


def test_a_pytorchjob_without_leader_has_only_workers():
    manifest = build_manifest(
        PYTORCH,
        None,
        JobParameters(
            image=IMAGE,
            num_workers=2,
            with_leader=False,
            spec_fields={"elasticPolicy": {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 4}},
        ),
    )

    assert list(replicas(PYTORCH, manifest)) == ["Worker"]
    assert manifest["spec"]["elasticPolicy"] == {"rdzvBackend": "c10d", "minReplicas": 1, "maxReplicas": 4}
    validate_manifest(PYTORCH, set_identity(manifest, "elastic", "kubeflow", {}))


def test_pytorch_master_and_workers_run_the_same_command_and_get_gpus():
    manifest = build_manifest(
        PYTORCH,
        None,
        JobParameters(
            image=IMAGE,
            command=["torchrun", "--nproc-per-node=4"],
            args=["train.py", "--epochs=3"],
            num_workers=2,
            gpus_per_replica=4,
        ),
    )

    for replica in ("Master", "Worker"):
        container = main_container(PYTORCH, manifest, replica)
        assert container["command"] == ["torchrun", "--nproc-per-node=4"]
        assert container["args"] == ["train.py", "--epochs=3"]
        assert container["resources"] == {"limits": {GPU_RESOURCE: 4}}


def test_mpi_launcher_runs_the_command_and_workers_serve_ssh_with_the_gpus():
    manifest = build_manifest(
        MPI,
        None,
        JobParameters(
            image=MPI_IMAGE,
            command=["mpirun", "-n", "8"],
            args=["python", "/opt/train.py"],
            num_workers=2,
            gpus_per_replica=4,
        ),
    )

    launcher = main_container(MPI, manifest, "Launcher")
    worker = main_container(MPI, manifest, "Worker")
    assert launcher["command"] == ["mpirun", "-n", "8"]
    assert launcher["args"] == ["python", "/opt/train.py"]
    assert "resources" not in launcher
    assert worker["command"] == ["/usr/sbin/sshd", "-De"]
    assert "args" not in worker
    assert worker["resources"] == {"limits": {GPU_RESOURCE: 4}}
    assert "ports" not in launcher
    assert "ports" not in worker


def test_tfjob_from_parameters_has_workers_only():
    manifest = build_manifest(TF, None, JobParameters(image=IMAGE, gpus_per_replica=1))

    assert list(replicas(TF, manifest)) == ["Worker"]
    assert main_container(TF, manifest, "Worker")["resources"] == {"limits": {GPU_RESOURCE: 1}}


def test_zero_gpus_is_written_not_dropped():
    manifest = build_manifest(PYTORCH, None, JobParameters(image=IMAGE, gpus_per_replica=0))
    assert main_container(PYTORCH, manifest, "Worker")["resources"] == {"limits": {GPU_RESOURCE: 0}}


# -- merged over a manifest -------------------------------------------------------------------------


def test_without_parameters_a_manifest_is_left_as_the_operator_would_run_it(load_yaml):
    # Only what the operator's own defaulting adds anyway: its named port, and empty pod metadata.
    manifest = load_yaml("manifests/pytorchjob.yaml")
    expected = copy.deepcopy(manifest)
    for spec in replicas(PYTORCH, expected).values():
        spec["template"]["metadata"] = {}
        spec["template"]["spec"]["containers"][0]["ports"] = [{"name": "pytorchjob-port", "containerPort": 23456}]

    assert build_manifest(PYTORCH, manifest) == expected
    assert build_manifest(PYTORCH, manifest, JobParameters()) == expected


def test_without_parameters_an_mpijob_keeps_the_operators_restart_policy_defaults(load_yaml):
    # The pi example sets no restartPolicy: the mpi-operator then defaults the Launcher to OnFailure
    # and the Workers to Never. The builder must not pin both to Never.
    manifest = load_yaml("manifests/mpijob.yaml")

    built = build_manifest(MPI, manifest)

    for spec in replicas(MPI, built).values():
        assert "restartPolicy" not in spec
    expected = copy.deepcopy(manifest)
    for spec in replicas(MPI, expected).values():
        spec["template"]["metadata"] = {}
    assert built == expected


def test_restart_policy_parameter_sets_every_replica(load_yaml):
    built = build_manifest(MPI, load_yaml("manifests/mpijob.yaml"), JobParameters(restart_policy="OnFailure"))
    assert {spec["restartPolicy"] for spec in replicas(MPI, built).values()} == {"OnFailure"}


def test_parameters_win_over_the_manifest(load_yaml):
    built = build_manifest(
        PYTORCH,
        load_yaml("manifests/pytorchjob.yaml"),
        JobParameters(image=IMAGE, command=["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=5"], num_workers=4),
    )

    assert replicas(PYTORCH, built)["Worker"]["replicas"] == 4
    assert replicas(PYTORCH, built)["Master"]["replicas"] == 1
    for replica in ("Master", "Worker"):
        container = main_container(PYTORCH, built, replica)
        assert container["image"] == IMAGE
        assert container["command"][-1] == "--epochs=5"
        assert container["imagePullPolicy"] == "Always"


def test_unset_parameters_leave_the_manifests_fields_alone(load_yaml):
    built = build_manifest(PYTORCH, load_yaml("manifests/pytorchjob.yaml"), JobParameters(image=IMAGE))

    container = main_container(PYTORCH, built, "Worker")
    assert container["command"] == ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
    assert "args" not in container
    assert "env" not in container
    assert "resources" not in container
    assert replicas(PYTORCH, built)["Worker"]["replicas"] == 1
    assert replicas(PYTORCH, built)["Worker"]["restartPolicy"] == "OnFailure"
    assert "runPolicy" not in built["spec"]
    assert built["metadata"] == {"name": "pytorch-simple", "namespace": "kubeflow"}


def test_an_mpi_worker_from_the_manifest_keeps_its_own_command(load_yaml):
    built = build_manifest(
        MPI, load_yaml("manifests/mpijob.yaml"), JobParameters(command=["mpirun"], args=["-n", "4", "/home/mpiuser/pi"])
    )

    assert main_container(MPI, built, "Launcher")["args"] == ["-n", "4", "/home/mpiuser/pi"]
    worker = main_container(MPI, built, "Worker")
    assert worker["command"] == ["/usr/sbin/sshd"]
    assert worker["args"] == ["-De", "-f", "/home/mpiuser/.sshd_config"]


def test_mpi_parameters_apply_to_the_first_container_whatever_its_name(load_yaml):
    built = build_manifest(MPI, load_yaml("manifests/mpijob.yaml"), JobParameters(image="mpioperator/mpi-pi:intel"))

    for replica in ("Launcher", "Worker"):
        containers = pod_spec(MPI, built, replica)["containers"]
        assert len(containers) == 1
        assert containers[0]["image"] == "mpioperator/mpi-pi:intel"


def test_a_manifest_without_the_named_container_is_left_for_validation_to_report():
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "template": {"spec": {"containers": [{"name": "trainer", "image": "old:1", "command": ["train"]}]}},
                }
            }
        },
    }

    built = build_manifest(PYTORCH, manifest, JobParameters(image=IMAGE))

    # No second container sneaks in beside the user's; validation names the mistake.
    assert pod_spec(PYTORCH, built, "Worker")["containers"] == [
        {"name": "trainer", "image": "old:1", "command": ["train"]}
    ]
    with pytest.raises(InvalidJobSpecError, match=r"no container named 'pytorch' \(found \['trainer'\]\)"):
        validate_manifest(PYTORCH, built)


def test_an_empty_pod_template_gets_the_named_container():
    manifest = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {}}}}}}

    built = build_manifest(PYTORCH, manifest, JobParameters(image=IMAGE))

    assert built["apiVersion"] == "kubeflow.org/v1"
    assert built["kind"] == "PyTorchJob"
    assert pod_spec(PYTORCH, built, "Worker")["containers"] == [
        {"name": "pytorch", "image": IMAGE, "ports": [{"name": "pytorchjob-port", "containerPort": 23456}]}
    ]


def test_num_workers_adds_a_worker_replica_a_manifest_lacks():
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "pytorch", "image": IMAGE}]}}}
            }
        },
    }

    built = build_manifest(PYTORCH, manifest, JobParameters(image=IMAGE, num_workers=2))

    worker = replicas(PYTORCH, built)["Worker"]
    assert worker["replicas"] == 2
    assert worker["restartPolicy"] == "OnFailure"
    assert main_container(PYTORCH, built, "Worker")["image"] == IMAGE
    assert "restartPolicy" not in replicas(PYTORCH, built)["Master"]


def test_env_is_merged_by_name(load_yaml):
    built = build_manifest(
        PYTORCH,
        load_yaml("manifests/pytorchjob-elastic.yaml"),
        JobParameters(env={"LOGLEVEL": "INFO", "NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "4"}),
    )

    assert main_container(PYTORCH, built, "Worker")["env"] == [
        {"name": "LOGLEVEL", "value": "INFO"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "OMP_NUM_THREADS", "value": "4"},
    ]


def test_env_as_kubernetes_env_vars_keeps_value_from_and_unrelated_entries(load_yaml):
    secret_ref = {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}

    built = build_manifest(PYTORCH, load_yaml("manifests/pytorchjob-elastic.yaml"), JobParameters(env=[secret_ref]))

    assert main_container(PYTORCH, built, "Worker")["env"] == [{"name": "LOGLEVEL", "value": "DEBUG"}, secret_ref]


def test_resources_for_all_replicas_merge_over_the_manifests(load_yaml):
    built = build_manifest(
        MPI,
        load_yaml("manifests/mpijob.yaml"),
        JobParameters(resources={"limits": {"memory": "8Gi"}, "requests": {"cpu": "2"}}),
    )

    for replica in ("Launcher", "Worker"):
        assert main_container(MPI, built, replica)["resources"] == {
            "limits": {"cpu": 1, "memory": "8Gi"},
            "requests": {"cpu": "2"},
        }


def test_resources_per_replica_type(load_yaml):
    built = build_manifest(
        PYTORCH,
        load_yaml("manifests/pytorchjob.yaml"),
        JobParameters(
            resources={
                "Master": {"limits": {"cpu": "2", "memory": "4Gi"}},
                "Worker": {"limits": {"cpu": "8", "memory": "32Gi"}},
            }
        ),
    )

    assert main_container(PYTORCH, built, "Master")["resources"] == {"limits": {"cpu": "2", "memory": "4Gi"}}
    assert main_container(PYTORCH, built, "Worker")["resources"] == {"limits": {"cpu": "8", "memory": "32Gi"}}


def test_resources_per_replica_type_leave_unnamed_replicas_alone(load_yaml):
    built = build_manifest(
        MPI, load_yaml("manifests/mpijob.yaml"), JobParameters(resources={"Worker": {"limits": {"memory": "64Gi"}}})
    )

    assert main_container(MPI, built, "Launcher")["resources"] == {"limits": {"cpu": 1, "memory": "1Gi"}}
    assert main_container(MPI, built, "Worker")["resources"] == {"limits": {"cpu": 1, "memory": "64Gi"}}


def test_gpus_per_replica_over_an_mpijob_skip_the_launcher(load_yaml):
    built = build_manifest(
        MPI,
        load_yaml("manifests/mpijob.yaml"),
        JobParameters(gpus_per_replica=2, resources={"Launcher": {"limits": {"cpu": "500m"}}}),
    )

    assert main_container(MPI, built, "Launcher")["resources"] == {"limits": {"cpu": "500m", "memory": "1Gi"}}
    assert main_container(MPI, built, "Worker")["resources"] == {"limits": {"cpu": 1, "memory": "1Gi", GPU_RESOURCE: 2}}


def test_gpus_per_replica_combine_with_resources_for_all():
    limits = {"limits": {"memory": "16Gi"}}
    built = build_manifest(PYTORCH, None, JobParameters(image=IMAGE, resources=limits, gpus_per_replica=1))

    for replica in ("Master", "Worker"):
        assert main_container(PYTORCH, built, replica)["resources"] == {"limits": {"memory": "16Gi", GPU_RESOURCE: 1}}
    # The caller's mapping is not touched.
    assert limits == {"limits": {"memory": "16Gi"}}


def test_shm_size_mounts_a_memory_backed_dev_shm(load_yaml):
    built = build_manifest(
        PYTORCH, load_yaml("manifests/pytorchjob.yaml"), JobParameters(pod_options=PodOptions(shm_size="8Gi"))
    )

    for replica in ("Master", "Worker"):
        assert pod_spec(PYTORCH, built, replica)["volumes"] == [
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}
        ]
        assert main_container(PYTORCH, built, replica)["volumeMounts"] == [
            {"name": SHM_VOLUME, "mountPath": "/dev/shm"}
        ]


def test_volumes_and_mounts_merge_by_name_with_shm():
    data = {"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}
    manifest = build_manifest(PYTORCH, None, JobParameters(image=IMAGE))
    pod_spec(PYTORCH, manifest, "Worker")["volumes"] = [
        {"name": "data", "emptyDir": {}},
        {"name": "cache", "emptyDir": {}},
    ]

    built = build_manifest(
        PYTORCH,
        manifest,
        JobParameters(
            pod_options=PodOptions(
                volumes=[data], volume_mounts=[{"name": "data", "mountPath": "/data"}], shm_size="1Gi"
            )
        ),
    )

    assert pod_spec(PYTORCH, built, "Worker")["volumes"] == [
        {"name": "cache", "emptyDir": {}},
        data,
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    ]
    assert pod_spec(PYTORCH, built, "Master")["volumes"] == [
        data,
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    ]
    assert main_container(PYTORCH, built, "Worker")["volumeMounts"] == [
        {"name": "data", "mountPath": "/data"},
        {"name": SHM_VOLUME, "mountPath": "/dev/shm"},
    ]


def test_scheduling_parameters_land_in_every_pod_spec(load_yaml):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    master_spec = pod_spec(PYTORCH, manifest, "Master")
    master_spec["nodeSelector"] = {"kubernetes.io/os": "linux"}
    master_spec["tolerations"] = [{"key": "old", "operator": "Exists"}]
    gpu_toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

    built = build_manifest(
        PYTORCH,
        manifest,
        JobParameters(
            pod_options=PodOptions(
                node_selector={"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"},
                tolerations=[gpu_toleration],
                image_pull_secrets=["ghcr-pull", "ecr-pull"],
                service_account_name="trainer",
            )
        ),
    )

    master = pod_spec(PYTORCH, built, "Master")
    assert master["nodeSelector"] == {
        "kubernetes.io/os": "linux",
        "cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
    }
    assert master["tolerations"] == [gpu_toleration]
    assert master["imagePullSecrets"] == [{"name": "ghcr-pull"}, {"name": "ecr-pull"}]
    assert master["serviceAccountName"] == "trainer"
    worker = pod_spec(PYTORCH, built, "Worker")
    assert worker["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}
    assert worker["tolerations"] == [gpu_toleration]
    assert worker["serviceAccountName"] == "trainer"


def test_labels_and_annotations_go_on_the_job_and_its_pods(load_yaml):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    manifest["metadata"]["labels"] = {"team": "vision", "app": "mnist"}
    replicas(PYTORCH, manifest)["Worker"]["template"]["metadata"] = {"labels": {"tier": "worker"}}

    built = build_manifest(
        PYTORCH,
        manifest,
        JobParameters(
            labels={"app": "mnist-v2", "cost-center": "ml"},
            annotations={"sidecar.istio.io/inject": "false"},
        ),
    )

    assert built["metadata"]["labels"] == {"team": "vision", "app": "mnist-v2", "cost-center": "ml"}
    assert built["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    worker_metadata = replicas(PYTORCH, built)["Worker"]["template"]["metadata"]
    assert worker_metadata["labels"] == {"tier": "worker", "app": "mnist-v2", "cost-center": "ml"}
    assert worker_metadata["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert replicas(PYTORCH, built)["Master"]["template"]["metadata"]["labels"] == {
        "app": "mnist-v2",
        "cost-center": "ml",
    }


def test_run_policy_merges_into_the_manifests(load_yaml):
    built = build_manifest(
        MPI,
        load_yaml("manifests/mpijob.yaml"),
        JobParameters(
            run_policy=RunPolicy(
                clean_pod_policy="All",
                active_deadline_seconds=7200,
                backoff_limit=3,
                suspend=True,
                scheduling_queue="gpu-queue",
                priority_class="high-priority",
                min_available=3,
            )
        ),
    )

    assert built["spec"]["runPolicy"] == {
        "cleanPodPolicy": "All",
        "ttlSecondsAfterFinished": 60,
        "activeDeadlineSeconds": 7200,
        "backoffLimit": 3,
        "suspend": True,
        "schedulingPolicy": {"queue": "gpu-queue", "priorityClass": "high-priority", "minAvailable": 3},
    }


@pytest.mark.parametrize(
    ("policy", "spec"),
    [
        (RunPolicy(), {}),
        (RunPolicy(ttl_seconds_after_finished=0), {"ttlSecondsAfterFinished": 0}),
        (RunPolicy(suspend=False), {"suspend": False}),
        (RunPolicy(scheduling_queue="default"), {"schedulingPolicy": {"queue": "default"}}),
        (
            RunPolicy(clean_pod_policy="Running", min_available=2),
            {"cleanPodPolicy": "Running", "schedulingPolicy": {"minAvailable": 2}},
        ),
    ],
)
def test_run_policy_to_spec_writes_only_what_was_set(policy, spec):
    assert policy.to_spec() == spec


def test_spec_fields_deep_merge_into_the_spec(load_yaml):
    built = build_manifest(
        PYTORCH,
        load_yaml("manifests/pytorchjob-elastic.yaml"),
        JobParameters(spec_fields={"elasticPolicy": {"maxReplicas": 5, "maxRestarts": None}, "nprocPerNode": "4"}),
    )

    assert built["spec"]["elasticPolicy"] == {
        "rdzvBackend": "c10d",
        "minReplicas": 1,
        "maxReplicas": 5,
        "maxRestarts": 100,
    }
    assert built["spec"]["nprocPerNode"] == "4"
    assert replicas(PYTORCH, built)["Worker"]["replicas"] == 2


def test_spec_fields_for_an_mpijob():
    built = build_manifest(
        MPI, None, JobParameters(image=MPI_IMAGE, spec_fields={"slotsPerWorker": 4, "mpiImplementation": "Intel"})
    )
    assert built["spec"]["slotsPerWorker"] == 4
    assert built["spec"]["mpiImplementation"] == "Intel"


def test_the_base_manifest_and_parameters_are_not_modified(load_yaml):
    base = load_yaml("manifests/mpijob.yaml")
    base_before = copy.deepcopy(base)
    env = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    resources = {"Worker": {"limits": {"memory": "64Gi"}}}
    spec_fields = {"runPolicy": {"backoffLimit": 2}}

    built = build_manifest(
        MPI,
        base,
        JobParameters(
            image=MPI_IMAGE,
            command=["mpirun"],
            env=env,
            num_workers=4,
            resources=resources,
            gpus_per_replica=1,
            restart_policy="OnFailure",
            labels={"team": "hpc"},
            run_policy=RunPolicy(clean_pod_policy="All"),
            spec_fields=spec_fields,
            pod_options=PodOptions(shm_size="2Gi"),
        ),
    )

    assert base == base_before
    assert env == [{"name": "NCCL_DEBUG", "value": "INFO"}]
    assert resources == {"Worker": {"limits": {"memory": "64Gi"}}}
    assert spec_fields == {"runPolicy": {"backoffLimit": 2}}
    # The result shares nothing mutable with the base.
    main_container(MPI, built, "Worker")["resources"]["limits"]["cpu"] = 64
    assert base == base_before
    assert built["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "ttlSecondsAfterFinished": 60, "backoffLimit": 2}


def test_replica_specs_that_are_not_a_mapping_are_left_for_validation():
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": ["Worker"]}}
    assert build_manifest(PYTORCH, manifest, JobParameters(image=IMAGE))["spec"]["pytorchReplicaSpecs"] == ["Worker"]


# -- deep_merge and set_identity --------------------------------------------------------------------


def test_deep_merge_recurses_into_mappings_replaces_lists_and_skips_none():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": "keep", "e": {"f": 1}}
    override = {"a": {"c": [3], "g": 2}, "d": None, "e": "scalar now"}

    merged = deep_merge(base, override)

    assert merged == {"a": {"b": 1, "c": [3], "g": 2}, "d": "keep", "e": "scalar now"}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": "keep", "e": {"f": 1}}


def test_deep_merge_copies_override_values():
    override = {"tolerations": [{"key": "gpu"}]}
    merged = deep_merge({}, override)
    merged["tolerations"][0]["key"] = "changed"
    assert override == {"tolerations": [{"key": "gpu"}]}


def test_set_identity_names_the_job_and_adds_labels(load_yaml):
    manifest = load_yaml("manifests/pytorchjob.yaml")
    manifest["metadata"].update({"generateName": "pytorch-simple-", "labels": {"team": "vision"}})

    named = set_identity(
        manifest, "pytorch-simple-x7k2p9", "team-a", {"disttrain.airflow.apache.org/dag-id": "nightly"}
    )

    assert named["metadata"] == {
        "name": "pytorch-simple-x7k2p9",
        "namespace": "team-a",
        "labels": {"team": "vision", "disttrain.airflow.apache.org/dag-id": "nightly"},
    }
    assert manifest["metadata"]["name"] == "pytorch-simple"
    assert manifest["metadata"]["labels"] == {"team": "vision"}


def test_set_identity_on_a_manifest_without_metadata():
    assert set_identity({"kind": "TFJob"}, "tf", "default", {}) == {
        "kind": "TFJob",
        "metadata": {"name": "tf", "namespace": "default", "labels": {}},
    }
