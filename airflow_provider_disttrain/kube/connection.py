"""How a task and its trigger reach the cluster: the one connection value both sides share.

Credentials stay in Airflow's connection. A deferred task hands its trigger a ``ClusterConnection``:
the connection id and the kubeconfig context, which the triggerer resolves itself by reading the
connection, as the cncf.kubernetes triggers do. Only a kubeconfig *file* that the worker has (the
operator's ``config_file``, or a connection's ``kube_config_path``) may be missing in the triggerer;
then the kubeconfig travels too, cut down to the one context the task uses, its cluster and its user
(``minimal_kubeconfig``), together with the connection's other extras. Whatever travels is stored in
the metadata database's trigger row, which Airflow encrypts with its Fernet key.

The value is frozen and JSON-safe through ``to_dict``/``from_dict``, which is how a trigger stores it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class ClusterConnection:
    """Which cluster, reached how: what the sync hook hands to the trigger and the trigger to its clients.

    :param conn_id: the Airflow ``kubernetes`` connection, read where the client is built.
    :param cluster_context: the kubeconfig context; None: the connection's (or the kubeconfig's current one).
    :param kubeconfig: a kubeconfig that had to travel (a file only the worker has); one context only.
    :param extras: the connection's extras, travelling with ``kubeconfig`` (without the kubeconfig ones).
    """

    conn_id: str | None = None
    cluster_context: str | None = None
    kubeconfig: Mapping[str, Any] | None = None
    extras: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (how a trigger stores it)."""
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def unknown_keys(cls, stored: Mapping[str, Any]) -> list[str]:
        """The keys of a stored value that this version does not know (a newer version wrote them)."""
        return sorted(set(stored) - {field.name for field in fields(cls)})

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any], *, ignore_unknown: bool = False) -> ClusterConnection:
        """The value ``to_dict`` stored; unknown keys are refused, so a typo cannot drop credentials.

        ``ignore_unknown``: leave them out instead (the caller warns). A trigger row written by a newer
        worker and read by an older triggerer during a rolling upgrade: failing the task would be worse
        than reaching the cluster with the keys this version knows.
        """
        if (unknown := cls.unknown_keys(stored)) and not ignore_unknown:
            raise ValueError(f"connection: unknown keys {unknown}")
        return cls(**{key: value for key, value in stored.items() if key not in unknown})

    @cached_property
    def identity(self) -> str:
        """A stable key for "the same cluster, reached the same way": one shared client per identity."""
        text = json.dumps(asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def minimal_kubeconfig(kubeconfig: Mapping[str, Any], context: str | None) -> tuple[dict[str, Any], str]:
    """``kubeconfig`` cut down to ``context`` (default: its current one), that context's cluster and user.

    Returns the kubeconfig and the context's name. Raises ``ValueError`` naming what is missing.
    """
    name = context or kubeconfig.get("current-context")
    if not name:
        raise ValueError("kubeconfig: no context given and no current-context set")

    def named(section: str, wanted: Any) -> dict[str, Any]:
        for entry in kubeconfig.get(section) or []:
            if isinstance(entry, Mapping) and entry.get("name") == wanted:
                return dict(entry)
        raise ValueError(f"kubeconfig: {section} has no entry named {wanted!r}")

    chosen = named("contexts", name)
    spec = chosen.get("context") or {}
    minimal: dict[str, Any] = {
        "apiVersion": kubeconfig.get("apiVersion", "v1"),
        "kind": "Config",
        "clusters": [named("clusters", spec.get("cluster"))],
        "contexts": [chosen],
        "current-context": name,
        "users": [named("users", spec.get("user"))] if spec.get("user") else [],
    }
    return minimal, name
