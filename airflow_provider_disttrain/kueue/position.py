"""Where a queued job stands in Kueue's queues, from Kueue's visibility API (pure).

Kueue (v0.9 and later, feature ``VisibilityOnDemand``, on by default) serves the pending Workloads of a
LocalQueue in the order its scheduler will consider them, as an aggregated API:
``GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/<ns>/localqueues/<queue>/pendingworkloads``
answers a ``PendingWorkloadsSummary`` whose items carry ``positionInLocalQueue`` and
``positionInClusterQueue`` (0 is next; ``apis/visibility/v1beta2/types.go`` in Kueue v0.19.2). One
answer serves every job waiting in that LocalQueue, so the waiters of a LocalQueue share it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timezone
from typing import Any

from airflow_provider_disttrain.kube.conditions import parse_time

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta2"


def pending_workloads_path(namespace: str, local_queue: str) -> str:
    """The URL path of a LocalQueue's pending Workloads (namespace and name are DNS labels: no quoting)."""
    return (
        f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}/namespaces/{namespace}/localqueues/{local_queue}"
        "/pendingworkloads"
    )


@dataclass(frozen=True, slots=True)
class QueuePosition:
    """A pending Workload's place: 0 is the next one Kueue considers."""

    local_queue: str
    in_local_queue: int
    cluster_queue_position: int
    pending_in_local_queue: int

    def describe(self, *, since: str | None = None, waited_seconds: float | None = None) -> str:
        """``position 3 of 5 in LocalQueue 'user-queue' (7 in its ClusterQueue); queued since 09:12:03 UTC
        (13 min)``. ``since``: when the Workload was created (an API timestamp); ``waited_seconds``: how long
        ago that was, for a line written once (a line compared with the last one leaves it out)."""
        text = (
            f"position {self.in_local_queue + 1} of {self.pending_in_local_queue} in LocalQueue "
            f"{self.local_queue!r} ({self.cluster_queue_position + 1} in its ClusterQueue)"
        )
        if since is not None and (at := parse_time(since)) is not None:
            text += f"; queued since {at.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC"
            if waited_seconds is not None:
                text += f" ({duration_text(waited_seconds)})"
        return text


class MalformedAnswer(ValueError):
    """The visibility API answered something that is not a ``PendingWorkloadsSummary`` (a proxy's error
    page, a changed schema). One such answer is skipped: the last positions stay and the next is asked."""


def parse_summary(body: str | bytes) -> dict[str, Any]:
    """The JSON object of a visibility answer's body; ``MalformedAnswer`` when it is not one."""
    try:
        summary = json.loads(body)
    except ValueError as error:  # JSONDecodeError, and UnicodeDecodeError of bytes that are not UTF-8
        raise MalformedAnswer(f"not JSON: {error}") from error
    if not isinstance(summary, dict):
        raise MalformedAnswer(f"a JSON {type(summary).__name__}, not an object")
    return summary


def _position_field(item: Mapping[str, Any], key: str, name: str) -> int:
    value = item.get(key)
    if value is None:
        return 0  # omitted when zero (Go's omitempty)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedAnswer(f"item {name!r}: {key} is {value!r}, not a non-negative integer")
    return value


def positions(local_queue: str, summary: Mapping[str, Any]) -> dict[str, QueuePosition]:
    """Each pending Workload's position (keyed by the Workload's name) from a ``PendingWorkloadsSummary``.

    ``MalformedAnswer`` names what does not fit (items not a list, an item without a name, a position
    that is not a non-negative integer): the whole answer is refused rather than half believed.
    """
    items = summary.get("items") if isinstance(summary, Mapping) else None
    if items is None and isinstance(summary, Mapping):
        items = []
    if not isinstance(items, list):
        raise MalformedAnswer(f"items is {type(items).__name__}, not a list")
    found: dict[str, QueuePosition] = {}
    for index, item in enumerate(items):
        metadata = item.get("metadata") if isinstance(item, Mapping) else None
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            raise MalformedAnswer(f"item {index} has no metadata.name")
        found[name] = QueuePosition(
            local_queue=local_queue,
            in_local_queue=_position_field(item, "positionInLocalQueue", name),
            cluster_queue_position=_position_field(item, "positionInClusterQueue", name),
            pending_in_local_queue=len(items),
        )
    return found


def duration_text(seconds: float) -> str:
    """``45 s``, ``13 min``, ``2.5 h``: a wait as a person reads it (whole units, no false precision)."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
