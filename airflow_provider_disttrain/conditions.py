"""Reading ``status.conditions``, the one shape jobs, Workloads and JobSets share (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``status.conditions`` of a job, a Workload or any object that has them (empty when none)."""
    return list((obj.get("status") or {}).get("conditions") or [])


def condition(obj: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    """The condition of ``condition_type`` of ``obj``, or None."""
    return next((c for c in conditions(obj) if c.get("type") == condition_type), None)


def is_true(condition: Mapping[str, Any]) -> bool:
    return str(condition.get("status", "")).lower() == "true"
