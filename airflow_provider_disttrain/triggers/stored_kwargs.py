"""The trigger's keyword arguments as Airflow stores them, and the rows other provider versions wrote.

A deferred task's trigger lives in Airflow's metadata database as a class path and these keyword
arguments (``TrainingJobTrigger.serialize()``); the triggerer rebuilds the trigger from that row,
possibly with another version of the provider (an upgrade, a rolling upgrade). Each stored format
has a fixture under ``tests/fixtures/triggers``: a change to ``STORED_KEYS`` comes with a new one.

The typed values travel whole, each as a JSON-safe dict under its own key (``Deadlines``, ``WaitPolicy``,
``CleanupPolicy``: a duration as seconds); rows written before that (format v1 and older) carry them
flat, ``startup_deadline``, ``poll_interval``, ``delete_on_kill`` and the like, which still read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypeVar

from airflow_provider_disttrain.job.deadlines import Deadlines
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy

STORED_KEYS = (
    "kind",
    "name",
    "namespace",
    "uid",
    "connection",
    "deadlines",
    "wait_policy",
    "cleanup_policy",
    "watch_timeout",
    "gpus_per_replica",
    "stream_logs",
    "stream_logs_bytes_per_second",
    "worker_clusters",
)
"""The keyword arguments ``serialize()`` writes: the trigger's attributes of the same names."""

FLAT_KEYS: Mapping[str, tuple[str, str]] = {
    "startup_deadline": ("deadlines", "startup"),
    "queue_deadline": ("deadlines", "queue"),
    "execution_deadline": ("deadlines", "execution"),
    "poll_interval": ("wait_policy", "poll_interval"),
    "progress_interval": ("wait_policy", "progress_interval"),
    "api_failure_tolerance": ("wait_policy", "api_failure_tolerance"),
    "delete_on_kill": ("cleanup_policy", "on_kill"),
}
"""The keys rows of format v1 and older carried flat: the typed value and field each one is now."""

_TYPED = {"deadlines": Deadlines, "wait_policy": WaitPolicy, "cleanup_policy": CleanupPolicy}
_Value = TypeVar("_Value")


def stored_kwargs(trigger: Any) -> dict[str, Any]:
    """The row's keyword arguments for ``trigger`` (a ``TrainingJobTrigger``); the connection and the
    typed values as dicts."""
    kwargs = {key: getattr(trigger, key) for key in STORED_KEYS}
    kwargs["connection"] = trigger.connection.to_dict()
    typed = {key: _as_dict(kwargs[key]) for key in _TYPED}
    # Also flat, as format v1 stored them, for a triggerer of an earlier version (a rolling upgrade, a
    # downgrade): it ignores the typed values with a warning and reads these, so it keeps the same
    # deadlines and policies. Without them it would wait with no startup or queue deadline, and delete on
    # kill a job the task does not own (a sensor's).
    flat = {flat_key: typed[key][field] for flat_key, (key, field) in FLAT_KEYS.items()}
    return {**kwargs, **typed, **flat}


def _as_dict(value: Any) -> dict[str, Any]:
    """A frozen value's fields, JSON-safe: a duration as its seconds."""
    fields = dataclasses.asdict(value)
    return {key: item.total_seconds() if isinstance(item, timedelta) else item for key, item in fields.items()}


def flat_keys(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Takes the flat keys (``FLAT_KEYS``) out of a trigger's ``kwargs``."""
    return {key: kwargs.pop(key) for key in FLAT_KEYS if key in kwargs}


def stored_values(
    typed: Mapping[str, Any], flat: Mapping[str, Any], *, log: Any, title: str
) -> tuple[Deadlines, WaitPolicy, CleanupPolicy]:
    """The trigger's deadlines and policies from ``typed`` (given, or stored as dicts: keys of a newer
    version ignored with a warning) and the flat keys of an older row or a caller (``FLAT_KEYS``, each
    given one overriding its field)."""
    values: dict[str, Any] = {
        key: _from_stored(_TYPED[key], typed.get(key), key, log=log, title=title) for key in _TYPED
    }
    for flat_key, value in flat.items():
        if value is not None:
            key, field = FLAT_KEYS[flat_key]
            values[key] = dataclasses.replace(values[key], **{field: value})
    return values["deadlines"], values["wait_policy"], values["cleanup_policy"]  # type: ignore[return-value]


def _from_stored(cls: type[_Value], value: Any, key: str, *, log: Any, title: str) -> _Value:
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    known = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if unknown := sorted(set(value) - known):
        log.warning("Ignoring %s keys %s for %s: written by a newer version of the provider", key, unknown, title)
    return cls(**{name: item for name, item in value.items() if name in known})


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
