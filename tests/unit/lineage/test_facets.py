"""OpenLineage datasets and facets (lineage/facets.py), read back as OpenLineage serializes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import Asset, AssetAlias
from openlineage.client.serde import Serde

from airflow_provider_disttrain.lineage.facets import (
    FAILURE_FACET,
    JOB_FACET,
    METRICS_FACET,
    PRODUCER,
    USAGE_FACET,
    dataset_from_asset,
    dataset_from_uri,
    operator_lineage,
)


@pytest.mark.parametrize(
    ("uri", "namespace", "name"),
    [
        # The OpenLineage naming spec: object stores are scheme://bucket, the key without its slash.
        ("s3://example-bucket/datasets/v3", "s3://example-bucket", "datasets/v3"),
        ("s3a://example-bucket/datasets/v3/", "s3://example-bucket", "datasets/v3/"),
        ("s3://example-bucket", "s3://example-bucket", "/"),
        ("gs://models/run-7/model.pt", "gs://models", "run-7/model.pt"),
        # Local files: namespace file; a file on another host: file://host.
        ("file:///mnt/shared/models", "file", "/mnt/shared/models"),
        ("/mnt/shared/datasets/train.csv", "file", "/mnt/shared/datasets/train.csv"),
        ("file://nas-1/exports/models", "file://nas-1", "/exports/models"),
        # Any other scheme: scheme://authority and the path.
        ("hf://org/dataset", "hf://org", "/dataset"),
        ("hdfs://namenode:8020/warehouse/events", "hdfs://namenode:8020", "/warehouse/events"),
    ],
)
def test_dataset_from_uri_follows_the_naming_spec(uri: str, namespace: str, name: str) -> None:
    dataset = dataset_from_uri(uri)

    assert (dataset.namespace, dataset.name) == (namespace, name)


def test_dataset_from_uri_names_the_field_of_a_bad_uri() -> None:
    with pytest.raises(ValueError, match=r"^dataset_uri: 's3:///key' names no bucket$"):
        dataset_from_uri("s3:///key", "dataset_uri")


def test_an_asset_goes_through_the_converter_its_scheme_registered() -> None:
    # common-io (installed with Airflow) registers the file:// converter; s3:// has none without the
    # amazon provider, so its URI is named by the spec.
    file_asset = dataset_from_asset(Asset(name="model", uri="file:///mnt/shared/models"))
    s3_asset = dataset_from_asset(Asset(name="data", uri="s3://bucket/datasets/v3"))

    assert (file_asset.namespace, file_asset.name) == ("file", "/mnt/shared/models")
    assert (s3_asset.namespace, s3_asset.name) == ("s3://bucket", "datasets/v3")


JOB = {
    "kind": "PyTorchJob",
    "apiVersion": "kubeflow.org/v1",
    "namespace": "ml",
    "name": "train-x1",
    "uid": "u-1",
    "replicas": {"Master": 1, "Worker": 2},
    "gpus": 6,
    "images": ["trainer:1"],
    "localQueue": "team-a",
    "cluster": {"connection": "k8s", "context": None},
}


def serialized(value: Any) -> dict[str, Any]:
    return json.loads(Serde.to_json(value))


def test_operator_lineage_of_a_success() -> None:
    result = {"state": "succeeded", "duration_seconds": 42.0, "metrics": {"accuracy": 0.93, "loss": 0.2}}

    lineage = operator_lineage(
        input_uris=["hf://org/ds"],
        inlets=[Asset(name="d", uri="s3://b/ds"), AssetAlias(name="alias"), Asset(name="d2", uri="hf://org/ds")],
        outlets=[Asset(name="m", uri="s3://b/models/latest")],
        job=JOB,
        result=result,
    )

    assert [(d.namespace, d.name) for d in lineage.inputs] == [("hf://org", "/ds"), ("s3://b", "ds")]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [("s3://b", "models/latest")]
    assert set(lineage.run_facets) == {JOB_FACET, METRICS_FACET}
    job = serialized(lineage.run_facets[JOB_FACET])
    assert job.pop("_producer") == PRODUCER
    assert job.pop("_schemaURL") == f"{PRODUCER}:lineage/schemas/TrainingJobRunFacet.json#/$defs/TrainingJobRunFacet"
    # OpenLineage leaves None out.
    assert job == {**JOB, "cluster": {"connection": "k8s"}}
    metrics = serialized(lineage.run_facets[METRICS_FACET])
    assert metrics["_schemaURL"].endswith("#/$defs/TrainingMetricsRunFacet")
    assert {k: v for k, v in metrics.items() if not k.startswith("_")} == {
        "state": "succeeded",
        "durationSeconds": 42.0,
        "metrics": {"accuracy": 0.93, "loss": 0.2},
    }


USAGE = {"gpus": 4, "gpu_seconds": 2400.0, "running_seconds": 600.0, "queued_seconds": None}


def test_a_result_with_usage_has_the_usage_facet_and_one_without_none() -> None:
    result = {"state": "succeeded", "duration_seconds": 600.0, "metrics": {}}

    lineage = operator_lineage(job=JOB, result={**result, "usage": USAGE})

    usage = serialized(lineage.run_facets[USAGE_FACET])
    assert usage.pop("_schemaURL") == (
        f"{PRODUCER}:lineage/schemas/TrainingUsageRunFacet.json#/$defs/TrainingUsageRunFacet"
    )
    # OpenLineage leaves None out: the seconds queued were not known.
    assert usage == {"_producer": PRODUCER, "gpus": 4, "gpuSeconds": 2400.0, "runningSeconds": 600.0}
    # A result saved by an earlier release (a retry returns it) has no usage: no facet, not an empty one.
    assert USAGE_FACET not in operator_lineage(job=JOB, result=result).run_facets


def test_operator_lineage_of_a_failure() -> None:
    failure_class = {"class": "training", "reason": "OOMKilled", "evidence": ["master-0: OOMKilled"]}
    lineage = operator_lineage(
        job=JOB, failure=("failed", "PyTorchJob ml/train-x1 failed\n  master-0: OOMKilled", failure_class)
    )

    assert set(lineage.run_facets) == {JOB_FACET, FAILURE_FACET}
    failure = serialized(lineage.run_facets[FAILURE_FACET])
    assert (failure["reason"], failure["explanation"]) == (
        "failed",
        "PyTorchJob ml/train-x1 failed\n  master-0: OOMKilled",
    )
    assert failure["failureClass"] == failure_class
    assert (lineage.inputs, lineage.outputs) == ([], [])
    # An error that is not a job's failure (the API server refusing, say) has no class.
    unclassed = operator_lineage(job=JOB, failure=("error", "the API server refused", None))
    assert "failureClass" not in serialized(unclassed.run_facets[FAILURE_FACET])


def test_every_facet_matches_the_schema_its_schema_url_names() -> None:
    """``_schemaURL`` is ``<producer>:lineage/schemas/<file>#/$defs/<facet>``: a schema shipped in the package."""
    import jsonschema

    import airflow_provider_disttrain

    lineage = operator_lineage(
        job=JOB,
        result={"state": "succeeded", "duration_seconds": 1.5, "metrics": {"loss": 0.1}, "usage": USAGE},
        failure=("timeout", "x", {"class": "infrastructure", "reason": "preempted", "evidence": []}),
    )
    for facet in lineage.run_facets.values():
        value = serialized(facet)
        location, _, pointer = value["_schemaURL"].removeprefix(f"{PRODUCER}:").partition("#/$defs/")
        schema = json.loads((Path(airflow_provider_disttrain.__file__).parent / location).read_text())
        # The first part of allOf is OpenLineage's RunFacet (_producer, _schemaURL); the second is ours.
        base, own = schema["$defs"][pointer]["allOf"]
        assert base == {"$ref": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunFacet"}
        jsonschema.validate(value, own)
        assert set(value) - {"_producer", "_schemaURL"} <= set(own["properties"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {"reason": "crashed", "explanation": "x"},
            json.loads(
                (
                    Path(airflow_provider_disttrain.__file__).parent / "lineage/schemas/TrainingFailureRunFacet.json"
                ).read_text()
            )["$defs"]["TrainingFailureRunFacet"]["allOf"][1],
        )
