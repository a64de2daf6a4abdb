"""Reading an object's ``status.conditions`` (the one shape jobs, Workloads and JobSets share) and the
API's RFC 3339 times (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any


def conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``status.conditions`` of a job, a Workload or any object that has them (empty when none)."""
    return list((obj.get("status") or {}).get("conditions") or [])


def condition(obj: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    """The condition of ``condition_type`` of ``obj``, or None."""
    return next((c for c in conditions(obj) if c.get("type") == condition_type), None)


def is_true(condition: Mapping[str, Any]) -> bool:
    return str(condition.get("status", "")).lower() == "true"


def parse_time(value: Any) -> datetime | None:
    """An API timestamp (``2024-05-01T10:00:00Z``) as an aware datetime; None when absent or malformed."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
