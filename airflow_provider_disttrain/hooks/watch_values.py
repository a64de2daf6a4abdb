"""The values a shared watch is made of and shows (``hooks.shared_watch``): its key, a cached object,
its trouble, and ``trimmed``, what it keeps of an object."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WatchKey:
    cluster: str
    kind: str
    namespace: str
    label_selector: str = ""
    field_selector: str = ""
    index_label: str = ""
    """Subscribers name objects by this label's value instead of ``metadata.name``."""


@dataclass(frozen=True)
class CachedJob:
    """The latest object seen for a job; ``deleted`` once the API server said it is gone."""

    job: dict[str, Any]
    deleted: bool = False


@dataclass(frozen=True)
class WatchProblem:
    """Why the watch cannot see the server right now, and since when (the watch clock's monotonic seconds)."""

    error: BaseException
    since: float
    status: int | None
    fatal: bool
    """Not an outage: retrying will not help (a 404 of the resource type, a malformed answer)."""

    @property
    def denied(self) -> bool:
        return self.status in (401, 403)


def trimmed(job: Mapping[str, Any]) -> dict[str, Any]:
    """What waiting needs of a job (identity, labels, status), not its spec or managedFields.

    The cache holds one object per job of the namespace; trimming keeps 1,000 waiting jobs in a few MB.
    """
    metadata = job.get("metadata") or {}
    kept = {
        key: metadata[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "labels")
        if key in metadata
    }
    return {"apiVersion": job.get("apiVersion"), "kind": job.get("kind"), "metadata": kept, "status": job.get("status")}
