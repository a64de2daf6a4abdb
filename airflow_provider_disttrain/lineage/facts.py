"""What a training task's lineage says: which job ran where, what it read, what it wrote, how it ended.

OpenLineage (``lineage_facets``, through the optional openlineage provider) and the Asset events a
training task emits read the same facts, built here by pure functions from what the operator holds
anyway: the manifest it built, its job's identity, the result it returned, the explanation it failed
with. Nothing here asks the cluster and nothing imports Airflow or OpenLineage, so that the operators
that import this module keep DAG parsing light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.kueue.hold import queue_name


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _gpus(resources: Any) -> int:
    """GPUs one container asks for: its limits (Kubernetes requires requests to equal them), else its
    requests; every vendor's extended resource counts (``nvidia.com/gpu``, ``amd.com/gpu``)."""
    resources = _mapping(resources)
    for section in ("limits", "requests"):
        amounts = [amount for key, amount in _mapping(resources.get(section)).items() if str(key).endswith("/gpu")]
        if amounts:
            return sum(int(amount) for amount in amounts if str(amount).isdigit())
    return 0


def _replica_count(value: Any) -> int:
    # The CRDs default a replica spec without ``replicas`` to one replica.
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def replica_facts(kind: JobKind, manifest: Mapping[str, Any]) -> tuple[dict[str, int], int, list[str]]:
    """``(replicas by replica type, GPUs of the whole job, the containers' images)`` of a manifest.

    A TrainJob has one replica type, its trainer's nodes (``spec.trainer``; the runtime's defaults are
    not known without asking the cluster, so a TrainJob that leaves them to its runtime shows none).
    """
    spec = _mapping(manifest.get("spec"))
    images: set[str] = set()
    if not kind.has_replica_specs:
        trainer = _mapping(spec.get("trainer"))
        if trainer.get("image"):
            images.add(str(trainer["image"]))
        nodes = trainer.get("numNodes")
        if not isinstance(nodes, int) or isinstance(nodes, bool):
            return {}, 0, sorted(images)
        return {"trainer": nodes}, nodes * _gpus(trainer.get("resourcesPerNode")), sorted(images)
    replicas: dict[str, int] = {}
    gpus = 0
    for replica_type, replica in _mapping(spec.get(kind.replica_specs_key or "")).items():
        replica = _mapping(replica)
        count = _replica_count(replica.get("replicas"))
        replicas[str(replica_type)] = count
        pod_spec = _mapping(_mapping(replica.get("template")).get("spec"))
        for container in pod_spec.get("containers") or []:
            container = _mapping(container)
            gpus += count * _gpus(container.get("resources"))
            if container.get("image"):
                images.add(str(container["image"]))
    return replicas, gpus, sorted(images)


def job_facts(
    kind: JobKind,
    manifest: Mapping[str, Any] | None,
    *,
    name: str | None = None,
    namespace: str | None = None,
    uid: str | None = None,
    cluster: Mapping[str, str | None] | None = None,
    local_queue: str | None = None,
) -> dict[str, Any]:
    """The job as the lineage run facet shows it: identity, size, images, queue and cluster.

    ``manifest`` is the job the operator built (None for a job the task did not build: a sensor's);
    ``name``, ``namespace``, ``uid`` and ``local_queue`` win over the manifest's (a job is named, and
    labelled with its queue, when it is submitted).
    """
    manifest = manifest or {}
    metadata = _mapping(manifest.get("metadata"))
    replicas, gpus, images = replica_facts(kind, manifest)
    return {
        "kind": kind.kind,
        "apiVersion": kind.resource.api_version,
        "namespace": namespace or metadata.get("namespace"),
        "name": name or metadata.get("name"),
        "uid": uid or metadata.get("uid"),
        "replicas": replicas,
        "gpus": gpus,
        "images": images,
        "localQueue": local_queue or queue_name(manifest),
        "cluster": dict(cluster or {}),
    }


def without_userinfo(uri: str) -> str:
    """``uri`` without the ``user:password@`` of its authority (``https://user:token@host/x`` is
    ``https://host/x``, ``s3://KEY:SECRET@bucket/k`` is ``s3://bucket/k``), anything else unchanged.

    Lineage leaves the task: an OpenLineage backend, an Asset event's ``extra`` any DAG reads. A storage
    URI's credentials stay in the job, where the initializer needs them. Airflow's own Asset URIs drop
    them only when a password is given; a bare token as the user (``s3://TOKEN@bucket``) goes too.
    """
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def initializer_uris(manifest: Mapping[str, Any] | None) -> list[str]:
    """The storage URIs a TrainJob's initializers read (``spec.initializer.dataset``/``model``): its
    inputs, without credentials (``without_userinfo``). Empty for every other kind, which names no input
    in its manifest."""
    initializer = _mapping(_mapping(_mapping(manifest).get("spec")).get("initializer"))
    uris = [_mapping(initializer.get(step)).get("storageUri") for step in ("dataset", "model")]
    return [without_userinfo(uri) for uri in uris if isinstance(uri, str) and uri]


def split_uri(uri: str, field: str = "uri") -> tuple[str, str, str]:
    """``(scheme, authority, path)`` of a dataset URI; a path without a scheme is a local file. The
    authority has no credentials (``without_userinfo``).

    Raises ``ValueError`` naming ``field`` for what names no dataset (quoting the URI without credentials).
    """
    if not isinstance(uri, str) or not uri.strip():
        raise ValueError(f"{field}: expected a dataset URI such as s3://bucket/path, got {uri!r}")
    uri = without_userinfo(uri.strip())
    parts = urlsplit(uri)
    if not parts.scheme:
        if not parts.path.startswith("/"):
            raise ValueError(f"{field}: a path without a scheme must be absolute, got {uri!r}")
        return "file", "", parts.path
    if not parts.netloc and not parts.path:
        raise ValueError(f"{field}: {uri!r} names no location after {parts.scheme}://")
    return parts.scheme.lower(), parts.netloc, parts.path


def asset_event_extra(result: Mapping[str, Any], model_uri: str, cluster: Mapping[str, Any]) -> dict[str, Any]:
    """The ``extra`` of the Asset event a training task emits for its model: enough for a DAG scheduled
    on the model to deploy or evaluate it without reading the training DAG's XComs."""
    return {
        "model_uri": without_userinfo(model_uri),
        "job": {key: result.get(key) for key in ("kind", "namespace", "name", "uid")},
        "cluster": dict(cluster),
        "state": result.get("state"),
        "duration_seconds": result.get("duration_seconds"),
        "metrics": dict(_mapping(result.get("metrics"))),
    }
