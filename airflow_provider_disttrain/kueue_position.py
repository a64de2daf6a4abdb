"""Where a queued job stands in Kueue's queues, from Kueue's visibility API (pure).

Kueue (v0.9 and later, feature ``VisibilityOnDemand``, on by default) serves the pending Workloads of a
LocalQueue in the order its scheduler will consider them, as an aggregated API:
``GET /apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/<ns>/localqueues/<queue>/pendingworkloads``
answers a ``PendingWorkloadsSummary`` whose items carry ``positionInLocalQueue`` and
``positionInClusterQueue`` (0 is next; ``apis/visibility/v1beta2/types.go`` in Kueue v0.19.2). One
answer serves every job waiting in that LocalQueue, so the waiters of a LocalQueue share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timezone
from typing import Any

from airflow_provider_disttrain.conditions import parse_time

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
                text += f" ({_duration(waited_seconds)})"
        return text


def positions(local_queue: str, summary: Mapping[str, Any]) -> dict[str, QueuePosition]:
    """Each pending Workload's position (keyed by the Workload's name) from a ``PendingWorkloadsSummary``."""
    items = [item for item in summary.get("items") or [] if isinstance(item, Mapping)]
    found: dict[str, QueuePosition] = {}
    for item in items:
        name = (item.get("metadata") or {}).get("name")
        if not name:
            continue
        found[str(name)] = QueuePosition(
            local_queue=local_queue,
            in_local_queue=int(item.get("positionInLocalQueue") or 0),
            cluster_queue_position=int(item.get("positionInClusterQueue") or 0),
            pending_in_local_queue=len(items),
        )
    return found


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
