"""The lineage facts (lineage/facts.py): pure functions of a manifest and a result, table-tested."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.lineage.facts import (
    asset_event_extra,
    initializer_uris,
    job_facts,
    replica_facts,
    split_uri,
    without_userinfo,
)


def replica(count: int | None, *containers: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": list(containers)}}}
    if count is not None:
        spec["replicas"] = count
    return spec


def container(image: str | None, **resources: Any) -> dict[str, Any]:
    value: dict[str, Any] = {"name": "pytorch", "resources": resources}
    if image is not None:
        value["image"] = image
    return value


GPU2 = {"limits": {"nvidia.com/gpu": 2}}


@pytest.mark.parametrize(
    ("kind", "spec", "expected"),
    [
        pytest.param(
            "PyTorchJob",
            {
                "pytorchReplicaSpecs": {
                    "Master": replica(1, container("t:1", **GPU2)),
                    "Worker": replica(3, container("t:1", **GPU2)),
                }
            },
            ({"Master": 1, "Worker": 3}, 8, ["t:1"]),
            id="master-and-workers-with-gpus",
        ),
        pytest.param(
            "PyTorchJob",
            {"pytorchReplicaSpecs": {"Worker": replica(None, container("t:1"), container("sidecar:2"))}},
            ({"Worker": 1}, 0, ["sidecar:2", "t:1"]),
            id="replicas-default-to-one-every-image-counts",
        ),
        pytest.param(
            "MPIJob",
            {
                "mpiReplicaSpecs": {
                    "Launcher": replica(1, container("mpi:1")),
                    "Worker": replica(2, container("mpi:1", requests={"amd.com/gpu": "1"})),
                }
            },
            ({"Launcher": 1, "Worker": 2}, 2, ["mpi:1"]),
            id="requests-when-no-limits-any-vendor",
        ),
        pytest.param(
            "PyTorchJob",
            {"pytorchReplicaSpecs": {"Worker": replica(2, container(None, limits={"nvidia.com/gpu": "{{ n }}"}))}},
            ({"Worker": 2}, 0, []),
            id="a-value-that-is-not-a-count-counts-none",
        ),
        pytest.param(
            "TrainJob",
            {"trainer": {"image": "llm:3", "numNodes": 4, "resourcesPerNode": GPU2}},
            ({"trainer": 4}, 8, ["llm:3"]),
            id="trainjob-nodes",
        ),
        pytest.param(
            "TrainJob", {"runtimeRef": {"name": "torch-distributed"}}, ({}, 0, []), id="trainjob-runtime-only"
        ),
        pytest.param("PyTorchJob", {}, ({}, 0, []), id="empty"),
    ],
)
def test_replica_facts(kind: str, spec: dict[str, Any], expected: tuple[Any, ...]) -> None:
    assert replica_facts(get_job_kind(kind), {"spec": spec}) == expected


def test_job_facts_prefer_the_submitted_identity_over_the_manifest() -> None:
    manifest = {
        "metadata": {"name": "nightly", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {"pytorchReplicaSpecs": {"Worker": replica(2, container("t:1", **GPU2))}},
    }
    cluster = {"connection": "k8s_prod", "context": "gpu-east"}

    submitted = job_facts(get_job_kind("PyTorchJob"), manifest, name="nightly-x1", uid="u-1", cluster=cluster)
    unsubmitted = job_facts(get_job_kind("PyTorchJob"), manifest, local_queue="team-b")

    assert submitted == {
        "kind": "PyTorchJob",
        "apiVersion": "kubeflow.org/v1",
        "namespace": "ml",
        "name": "nightly-x1",
        "uid": "u-1",
        "replicas": {"Worker": 2},
        "gpus": 4,
        "images": ["t:1"],
        "localQueue": "team-a",
        "cluster": cluster,
    }
    assert (unsubmitted["name"], unsubmitted["localQueue"], unsubmitted["cluster"]) == ("nightly", "team-b", {})


def test_job_facts_of_a_job_the_task_did_not_build() -> None:
    facts = job_facts(get_job_kind("MPIJob"), None, name="j", namespace="ns")

    assert (facts["kind"], facts["name"], facts["namespace"], facts["replicas"], facts["images"]) == (
        "MPIJob",
        "j",
        "ns",
        {},
        [],
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            {"initializer": {"dataset": {"storageUri": "hf://org/ds"}, "model": {"storageUri": "s3://m/llama"}}},
            ["hf://org/ds", "s3://m/llama"],
        ),
        ({"initializer": {"model": {"storageUri": "hf://meta/llama"}}}, ["hf://meta/llama"]),
        ({"initializer": {"dataset": {"storageUri": ""}}}, []),
        ({"pytorchReplicaSpecs": {}}, []),
    ],
)
def test_initializer_uris(spec: dict[str, Any], expected: list[str]) -> None:
    assert initializer_uris({"spec": spec}) == expected


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://bucket/datasets/v3", ("s3", "bucket", "/datasets/v3")),
        ("S3://bucket/k", ("s3", "bucket", "/k")),
        ("file:///mnt/shared/models", ("file", "", "/mnt/shared/models")),
        ("file://nas-1/exports/models", ("file", "nas-1", "/exports/models")),
        ("/mnt/shared/datasets/train.csv", ("file", "", "/mnt/shared/datasets/train.csv")),
        ("hf://org/dataset", ("hf", "org", "/dataset")),
        (" gs://b/o ", ("gs", "b", "/o")),
    ],
)
def test_split_uri(uri: str, expected: tuple[str, str, str]) -> None:
    assert split_uri(uri) == expected


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", "dataset_uri: expected a dataset URI such as s3://bucket/path, got ''"),
        (None, "dataset_uri: expected a dataset URI such as s3://bucket/path, got None"),
        ("models/latest", "dataset_uri: a path without a scheme must be absolute, got 'models/latest'"),
        ("s3://", "dataset_uri: 's3://' names no location after s3://"),
    ],
)
def test_split_uri_refuses_what_names_no_dataset(uri: Any, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        split_uri(uri, "dataset_uri")
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("https://user:token@host.example/x?y=1", "https://host.example/x?y=1"),
        ("s3://KEY:SECRET@bucket/k", "s3://bucket/k"),
        ("s3://TOKEN@bucket/k", "s3://bucket/k"),
        ("https://u:p@ss@host:8443/x", "https://host:8443/x"),
        ("hf://org/model", "hf://org/model"),
        ("/mnt/data/a@b", "/mnt/data/a@b"),
    ],
)
def test_without_userinfo(uri: str, expected: str) -> None:
    assert without_userinfo(uri) == expected


def test_split_uri_and_the_asset_extra_drop_credentials() -> None:
    assert split_uri("s3://KEY:SECRET@bucket/k") == ("s3", "bucket", "/k")
    extra = asset_event_extra({}, "s3://TOKEN@bucket/model", {})
    assert extra["model_uri"] == "s3://bucket/model"


def test_asset_event_extra_holds_the_job_the_metrics_and_the_model() -> None:
    result = {
        "kind": "PyTorchJob",
        "namespace": "ml",
        "name": "train-x1",
        "uid": "u-1",
        "state": "succeeded",
        "duration_seconds": 42.0,
        "replica_statuses": {"Worker": {"succeeded": 2}},
        "metrics": {"accuracy": 0.93},
    }

    extra = asset_event_extra(result, "file:///mnt/shared/models", {"connection": "k8s", "context": None})

    assert extra == {
        "model_uri": "file:///mnt/shared/models",
        "job": {"kind": "PyTorchJob", "namespace": "ml", "name": "train-x1", "uid": "u-1"},
        "cluster": {"connection": "k8s", "context": None},
        "state": "succeeded",
        "duration_seconds": 42.0,
        "metrics": {"accuracy": 0.93},
    }
    assert asset_event_extra({**result, "metrics": None}, "s3://b/m", {})["metrics"] == {}
