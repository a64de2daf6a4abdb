"""Fixtures of the decorator tests: ``execute`` called as the task runner would."""

from __future__ import annotations

import pytest
from airflow.sdk.bases.operator import ExecutorSafeguard


@pytest.fixture(autouse=True)
def called_by_the_task_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests call ``execute`` directly; tell Airflow's guard against that it is on purpose."""
    monkeypatch.setattr(ExecutorSafeguard, "test_mode", True)
