"""Where Kueue's MultiKueue runs a job, and which Airflow connection reaches that cluster.

With MultiKueue, a job is submitted to a manager cluster; Kueue dispatches its Workload to a worker
cluster (``Workload.status.clusterName``, the name of a ``MultiKueueCluster``), creates a copy of the job
of the same name and namespace there, and mirrors the copy's status onto the manager's job. The pods,
their logs, termination messages and events exist only on the worker. The provider reaches the worker
through the Airflow connection mapped to the cluster's name:

1. the operator's ``worker_clusters`` parameter (cluster name -> kubernetes connection id), then
2. the extra ``worker_clusters`` of the manager's connection (the same mapping, as a JSON object),

per cluster name: a name the parameter maps is never looked up in the extra. A cluster neither maps is
no error: the job is still followed through the manager's mirrored status, and the log, the result and
a failure's explanation say where its pods live and which setting would map it (``Dispatch.note``).

Pure functions over the Workload and the mappings; the reads are ``hooks.worker_cluster``'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.kube.rules import is_dns1123_subdomain

WORKER_CLUSTERS = "worker_clusters"
"""The operator's parameter and the manager connection's extra that map a worker cluster to a connection."""
PARAMETER = "the operator's worker_clusters"
EXTRA = "the extra worker_clusters of connection"


def dispatched_to(workload: Mapping[str, Any] | None) -> str | None:
    """The worker cluster MultiKueue dispatched the Workload to (``status.clusterName``), or None: not
    dispatched (yet), or a cluster without MultiKueue."""
    name = ((workload or {}).get("status") or {}).get("clusterName")
    return str(name) if name else None


def validate_worker_clusters(value: object, field: str = WORKER_CLUSTERS) -> dict[str, str]:
    """``value`` as a mapping of worker cluster name -> connection id, or ``InvalidJobSpecError`` naming
    ``field`` (``worker_clusters['w1']`` for one entry). A cluster name is a ``MultiKueueCluster``'s
    name (a DNS-1123 subdomain; Airflow renders a templated mapping's values, never its keys); a
    connection id is a non-empty string. None is no mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidJobSpecError(field, f"expected a mapping of worker cluster name to connection id, got {value!r}")
    mapping: dict[str, str] = {}
    for cluster, conn_id in value.items():
        if not isinstance(cluster, str) or not is_dns1123_subdomain(cluster):
            raise InvalidJobSpecError(
                field, f"{cluster!r} is not a MultiKueueCluster name (a DNS-1123 subdomain, e.g. 'worker-1')"
            )
        if not isinstance(conn_id, str) or not conn_id.strip():
            raise InvalidJobSpecError(f"{field}[{cluster!r}]", f"expected a connection id, got {conn_id!r}")
        mapping[cluster] = conn_id.strip()
    return mapping


def extra_worker_clusters(extra: object, conn_id: str | None) -> dict[str, str]:
    """The manager connection's extra ``worker_clusters`` (a JSON object, or its text as the UI stores
    an extra field), validated with the connection named in the error."""
    field = f"connection {conn_id!r} extra {WORKER_CLUSTERS}"
    if isinstance(extra, str):
        try:
            extra = json.loads(extra) if extra.strip() else None
        except ValueError as error:
            raise InvalidJobSpecError(field, f"not a JSON object: {error}") from None
    return validate_worker_clusters(extra, field)


@dataclass(frozen=True)
class Dispatch:
    """A job MultiKueue dispatched: the worker ``cluster`` and the connection that reaches it (None: none
    maps it), from which setting (``source``: ``PARAMETER`` or ``EXTRA``)."""

    cluster: str
    conn_id: str | None = None
    source: str | None = None
    manager_conn_id: str | None = None

    @property
    def mapped(self) -> bool:
        return self.conn_id is not None

    def note(self, title: str) -> str:
        """Where the job's pods and logs are, in words for the task log, the result and a failure."""
        if self.mapped:
            return (
                f"{title} runs on worker cluster {self.cluster!r} (MultiKueue): its pods are read through "
                f"connection {self.conn_id!r} ({self.source})"
            )
        return (
            f"{title} runs on worker cluster {self.cluster!r} (MultiKueue), which no connection maps: its pods, "
            "logs and events live there and were not read; the task follows the manager's mirrored status. "
            f"Map it with worker_clusters={{{self.cluster!r}: '<kubernetes connection id>'}} on the operator, "
            f"or the extra {WORKER_CLUSTERS} of connection {self.manager_conn_id!r}"
        )

    def result(self, title: str) -> dict[str, str]:
        """What the task's result (its XCom, JSON-safe) carries about the dispatch."""
        return {"cluster": self.cluster} if self.mapped else {"cluster": self.cluster, "cluster_note": self.note(title)}


@dataclass(frozen=True)
class WorkerClusters:
    """The two mappings of worker cluster name -> connection id, and the manager's connection id (named
    in the note that says how to map a cluster). Travels to the trigger as ``to_dict()``."""

    parameter: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, str] = field(default_factory=dict)
    manager_conn_id: str | None = None

    def resolve(self, cluster: str) -> Dispatch:
        """The connection of worker ``cluster``: the operator's mapping first, then the manager connection's.

        By the exact cluster name only: a near name (another case, a prefix) maps nothing, as access is
        never decided on a shortened or rewritten name.
        """
        if cluster in self.parameter:
            return Dispatch(cluster, self.parameter[cluster], PARAMETER, self.manager_conn_id)
        if cluster in self.extra:
            return Dispatch(cluster, self.extra[cluster], f"{EXTRA} {self.manager_conn_id!r}", self.manager_conn_id)
        return Dispatch(cluster, None, None, self.manager_conn_id)

    @property
    def maps_any(self) -> bool:
        """Whether some worker cluster is mapped: only then is there a cluster to read pods from while the
        job runs (an unmapped dispatch is said once the wait is over)."""
        return bool(self.parameter or self.extra)

    def to_dict(self) -> dict[str, Any]:
        return {"parameter": dict(self.parameter), "extra": dict(self.extra), "manager_conn_id": self.manager_conn_id}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any] | None) -> WorkerClusters:
        """From ``to_dict()``'s form (a stored trigger row); None (an older row) maps nothing."""
        value = value or {}
        return cls(
            validate_worker_clusters(value.get("parameter")),
            validate_worker_clusters(value.get("extra")),
            value.get("manager_conn_id"),
        )
