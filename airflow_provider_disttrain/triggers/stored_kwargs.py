"""The trigger's keyword arguments as Airflow stores them, and the rows other provider versions wrote.

A deferred task's trigger lives in Airflow's metadata database as a class path and these keyword
arguments (``TrainingJobTrigger.serialize()``); the triggerer rebuilds the trigger from that row,
possibly with another version of the provider (an upgrade, a rolling upgrade). Each stored format
has a fixture under ``tests/fixtures/triggers``: a change to ``STORED_KEYS`` comes with a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.kube.connection import ClusterConnection

STORED_KEYS = (
    "kind",
    "name",
    "namespace",
    "uid",
    "connection",
    "startup_deadline",
    "execution_deadline",
    "queue_deadline",
    "poll_interval",
    "watch_timeout",
    "progress_interval",
    "gpus_per_replica",
    "api_failure_tolerance",
    "delete_on_kill",
    "stream_logs",
    "stream_logs_bytes_per_second",
)
"""The keyword arguments ``serialize()`` writes: the trigger's attributes of the same names."""


def stored_kwargs(trigger: Any) -> dict[str, Any]:
    """The row's keyword arguments for ``trigger`` (a ``TrainingJobTrigger``); the connection as a dict."""
    return {key: trigger.connection.to_dict() if key == "connection" else getattr(trigger, key) for key in STORED_KEYS}


def warn_newer_kwargs(log: Any, newer_kwargs: Mapping[str, Any], kind: str, namespace: str, name: str) -> None:
    """Keys a newer provider version wrote are ignored with a warning, not refused (see the trigger's
    ``newer_kwargs``)."""
    if newer_kwargs:
        log.warning(
            "Ignoring trigger arguments %s for %s %s/%s: written by a newer version of the provider than "
            "this triggerer's (a rolling upgrade); the job is waited for without them",
            sorted(newer_kwargs),
            kind,
            namespace,
            name,
        )


def stored_connection(
    connection: ClusterConnection | Mapping[str, Any] | None,
    kubernetes_conn_id: str | None,
    cluster_context: str | None,
    config_dict: dict[str, Any] | None,
    connection_extras: dict[str, Any] | None,
    *,
    log: Any,
    kind: str,
    namespace: str,
    name: str,
) -> ClusterConnection:
    """The trigger's connection: given, stored as a dict (keys of a newer version ignored with a
    warning), or built from the flat keys of a row stored before the typed connection."""
    if connection is None:  # a row stored before the typed connection
        return ClusterConnection(kubernetes_conn_id, cluster_context, config_dict, connection_extras)
    if isinstance(connection, ClusterConnection):
        return connection
    if unknown := ClusterConnection.unknown_keys(connection):
        log.warning(
            "Ignoring connection keys %s for %s %s/%s: written by a newer version of the provider",
            unknown,
            kind,
            namespace,
            name,
        )
    return ClusterConnection.from_dict(connection, ignore_unknown=True)
