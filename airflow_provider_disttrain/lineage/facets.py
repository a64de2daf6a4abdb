"""OpenLineage for a training task: its datasets and run facets, as the openlineage provider wants them.

Imported only when an OpenLineage listener asks a task for its lineage (``operators/lineage.py``):
it needs the optional ``apache-airflow-providers-openlineage`` (the ``[openlineage]`` extra), which a
DAG file never imports. The facts come from ``lineage/facts.py``; this module only dresses them as
OpenLineage's attrs classes.

Datasets are named as the OpenLineage naming spec says. An Asset goes through the converter that an
installed provider registers for its scheme (``translate_airflow_asset``, what the openlineage
provider does with inlets and outlets itself); a URI without one (an ``s3://`` Asset when the amazon
provider is not installed, a TrainJob's ``storageUri``) through openlineage-python's naming classes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attr
from airflow.providers.openlineage.extractors import OperatorLineage
from airflow.providers.openlineage.utils.utils import translate_airflow_asset
from openlineage.client.event_v2 import Dataset
from openlineage.client.facet_v2 import RunFacet
from openlineage.client.naming import dataset as naming

from airflow_provider_disttrain.lineage.facts import split_uri, without_userinfo
from airflow_provider_disttrain.version import __version__

# A URI naming this provider and its version (OpenLineage asks for one, e.g. a repository at a tag;
# the package has no published home to point at).
PRODUCER = f"urn:airflow-provider-disttrain:{__version__}"
# The run facets' keys in an event, prefixed as OpenLineage asks of custom facets.
JOB_FACET = "disttrainJob"
METRICS_FACET = "disttrainMetrics"
FAILURE_FACET = "disttrainFailure"
USAGE_FACET = "disttrainUsage"
# Conventional default namespaces of object stores whose URIs have a bucket as their authority.
_BUCKET_SCHEMES = {"s3": naming.S3, "s3a": naming.S3, "s3n": naming.S3, "gs": naming.GCS}


def _schema(facet: str) -> str:
    # The JSON schema shipped in the package of that version (airflow_provider_disttrain/lineage/schemas/).
    return f"{PRODUCER}:lineage/schemas/{facet}.json#/$defs/{facet}"


@attr.define
class TrainingJobRunFacet(RunFacet):
    """The Kubeflow job a training task ran: what, where, how large, from which images, in which queue."""

    kind: str
    apiVersion: str  # OpenLineage's fields are camelCase
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    replicas: dict[str, int] = attr.field(factory=dict)
    gpus: int = 0
    images: list[str] = attr.field(factory=list)
    localQueue: str | None = None
    cluster: dict[str, str | None] = attr.field(factory=dict)

    @staticmethod
    def _get_schema() -> str:
        return _schema("TrainingJobRunFacet")


@attr.define
class TrainingMetricsRunFacet(RunFacet):
    """How a finished job ended and the metrics its leader reported (its termination message)."""

    state: str | None = None
    durationSeconds: float | None = None
    metrics: dict[str, Any] = attr.field(factory=dict)

    @staticmethod
    def _get_schema() -> str:
        return _schema("TrainingMetricsRunFacet")


@attr.define
class TrainingUsageRunFacet(RunFacet):
    """What a finished job held (``job/usage.py``): GPU-seconds, wall seconds running, seconds queued.

    A facet of its own, not fields added to the metrics facet: a consumer of that schema sees no change."""

    gpus: int = 0
    gpuSeconds: float | None = None
    runningSeconds: float | None = None
    queuedSeconds: float | None = None

    @staticmethod
    def _get_schema() -> str:
        return _schema("TrainingUsageRunFacet")


@attr.define
class TrainingFailureRunFacet(RunFacet):
    """Why a training task failed: the explanation it failed with (replicas, container states, log
    lines, Warning events; ``diagnostics.py``)."""

    reason: str
    explanation: str
    failureClass: dict[str, Any] | None = None  # the training's or the infrastructure's, and the evidence

    @staticmethod
    def _get_schema() -> str:
        return _schema("TrainingFailureRunFacet")


def dataset_from_uri(uri: str, field: str = "uri") -> Dataset:
    """An OpenLineage dataset for a URI, per the naming spec: ``s3://bucket/key`` is namespace
    ``s3://bucket``, name ``key``; ``file:///path`` (or ``/path``) is ``file``, ``/path``; any other
    ``scheme://authority/path`` is ``scheme://authority``, ``/path``."""
    scheme, authority, path = split_uri(uri, field)
    named: naming.DatasetNaming
    if scheme in _BUCKET_SCHEMES:
        if not authority:
            raise ValueError(f"{field}: {without_userinfo(uri)!r} names no bucket")
        named = _BUCKET_SCHEMES[scheme](bucket_name=authority, object_key=path.lstrip("/") or "/")
    elif scheme == "file":
        named = naming.RemoteFileSystem(host=authority, path=path) if authority else naming.LocalFileSystem(path=path)
    else:
        return Dataset(namespace=f"{scheme}://{authority}", name=path or "/")
    return Dataset(namespace=named.get_namespace(), name=named.get_name())


def dataset_from_asset(asset: Any) -> Dataset:
    """An Asset as an OpenLineage dataset: the converter a provider registered for its scheme, else
    the naming spec applied to its URI. Either reads the URI without credentials: Airflow drops the user
    info of an Asset's URI only when it has a password (``s3://TOKEN@bucket`` keeps its token)."""
    if (uri := without_userinfo(asset.uri)) != asset.uri:
        asset = attr.evolve(asset, uri=uri)
    return translate_airflow_asset(asset, None) or dataset_from_uri(asset.uri, f"Asset {asset.name!r}")


def _assets(items: Iterable[Any]) -> list[Any]:
    # Inlets and outlets may hold AssetAliases (resolved by Airflow at run time) and other objects.
    return [item for item in items if isinstance(getattr(item, "uri", None), str)]


def operator_lineage(
    *,
    input_uris: Iterable[str] = (),
    inlets: Iterable[Any] = (),
    outlets: Iterable[Any] = (),
    job: Mapping[str, Any] | None = None,
    result: Mapping[str, Any] | None = None,
    failure: tuple[str, str, Mapping[str, Any] | None] | None = None,
) -> OperatorLineage:
    """The lineage of one training task: ``input_uris`` (what its manifest says it reads) and its
    ``inlets`` in, its ``outlets`` out; the job, the finished job's metrics and usage, the failure's explanation."""
    inputs = [dataset_from_uri(uri) for uri in input_uris] + [dataset_from_asset(a) for a in _assets(inlets)]
    run_facets: dict[str, RunFacet] = {}
    if job is not None:
        run_facets[JOB_FACET] = TrainingJobRunFacet(**job, producer=PRODUCER)
    if result is not None:
        run_facets[METRICS_FACET] = TrainingMetricsRunFacet(
            state=result.get("state"),
            durationSeconds=result.get("duration_seconds"),
            metrics=dict(result.get("metrics") or {}),
            producer=PRODUCER,
        )
        if usage := result.get("usage"):
            run_facets[USAGE_FACET] = TrainingUsageRunFacet(
                gpus=int(usage.get("gpus") or 0),
                gpuSeconds=usage.get("gpu_seconds"),
                runningSeconds=usage.get("running_seconds"),
                queuedSeconds=usage.get("queued_seconds"),
                producer=PRODUCER,
            )
    if failure is not None:
        reason, explanation, failure_class = failure
        run_facets[FAILURE_FACET] = TrainingFailureRunFacet(
            reason=reason,
            explanation=explanation,
            failureClass=dict(failure_class) if failure_class else None,
            producer=PRODUCER,
        )
    outputs = [dataset_from_asset(asset) for asset in _assets(outlets)]
    return OperatorLineage(inputs=_unique(inputs), outputs=_unique(outputs), run_facets=run_facets)


def _unique(datasets: list[Dataset]) -> list[Dataset]:
    """Each dataset once (an inlet may name what the manifest reads too), in order."""
    seen: dict[tuple[str, str], Dataset] = {}
    for dataset in datasets:
        seen.setdefault((dataset.namespace, dataset.name), dataset)
    return list(seen.values())
