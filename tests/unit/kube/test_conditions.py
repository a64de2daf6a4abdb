"""Reading ``status.conditions`` and the API's times, the one shape jobs, Workloads and JobSets share."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_provider_disttrain.kube.conditions import condition, conditions, is_true, parse_time

WORKLOAD = {
    "status": {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "False", "reason": "Pending"},
        ]
    }
}


@pytest.mark.parametrize("obj", [{}, {"status": None}, {"status": {}}, {"status": {"conditions": None}}])
def test_an_object_without_conditions_has_none(obj: dict[str, Any]) -> None:
    assert conditions(obj) == []
    assert condition(obj, "Admitted") is None


def test_a_condition_is_found_by_its_type() -> None:
    admitted = condition(WORKLOAD, "Admitted")

    assert admitted is not None and admitted["reason"] == "Pending"
    assert condition(WORKLOAD, "Evicted") is None
    assert [c["type"] for c in conditions(WORKLOAD)] == ["QuotaReserved", "Admitted"]


@pytest.mark.parametrize(("status", "true"), [("True", True), ("true", True), ("False", False), ("Unknown", False)])
def test_only_a_true_status_is_true(status: str, true: bool) -> None:
    assert is_true({"type": "Admitted", "status": status}) is true


def test_a_condition_without_a_status_is_not_true() -> None:
    assert is_true({"type": "Admitted"}) is False


def test_an_api_timestamp_is_an_aware_datetime() -> None:
    assert parse_time("2024-05-01T10:00:00Z") == datetime(2024, 5, 1, 10, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("value", [None, "", "yesterday", "2024-13-01T10:00:00Z"])
def test_an_absent_or_malformed_time_is_none(value: Any) -> None:
    assert parse_time(value) is None
