"""Upgrades do not strand deferred tasks: every stored trigger format still rebuilds and waits.

A deferred task's trigger lives in Airflow's metadata database as a class path and keyword arguments
(``serialize()``), written by the provider version that deferred it. After an upgrade the triggerer
rebuilds it from that row with the new code. Each file under ``tests/fixtures/triggers`` is such a row
as an earlier version wrote it; here it is rebuilt the way Airflow does (import the class path, call it
with the kwargs) and run against the fake API server until its job succeeds.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string

from airflow_provider_disttrain.naming import TASK_INSTANCE_LABEL
from tests.unit.fakes import make_job, succeeded_status

STORED_FORMATS = sorted((Path(__file__).parents[2] / "fixtures" / "triggers").glob("*.json"))
STORED_CONNECTION_ID = "k8s_inline"
RUN_TIMEOUT = 10.0


def stored(path: Path) -> tuple[str, dict[str, Any]]:
    row = json.loads(path.read_text())
    return row["classpath"], row["kwargs"]


def pointed_at(kwargs: dict[str, Any], server_url: str) -> dict[str, Any]:
    """The stored kwargs with their kubeconfig's server (wherever it is stored) made the fake API server's."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: server_url if key == "server" else walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    return walk(kwargs)


def test_there_is_a_stored_format_for_each_way_of_deferring() -> None:
    names = {path.name.split("-", 1)[1] for path in STORED_FORMATS}
    assert {"labelled_job.json", "name_watch.json", "stream_logs.json", "kueue.json"} <= names
    assert "config_dict_shipped.json" in names


@pytest.mark.parametrize("path", STORED_FORMATS, ids=[path.stem for path in STORED_FORMATS])
async def test_a_stored_trigger_rebuilds_and_sees_its_job_succeed(
    path: Path, apiserver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stored connection id names a connection the triggerer reads (as the cncf triggers do).
    extra = {"kube_config": json.dumps(apiserver.kubeconfig()), "namespace": "ml"}
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{STORED_CONNECTION_ID.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )
    classpath, kwargs = stored(path)
    labelled = kwargs.get("uid") is not None  # an operator's job carries the label; a sensor's need not
    labels = {TASK_INSTANCE_LABEL: "abc123"} if labelled else {}
    await apiserver.put(make_job("train-abc", "ml", uid="uid-1", status=succeeded_status(), labels=labels))

    trigger = import_string(classpath)(**pointed_at(kwargs, f"http://127.0.0.1:{apiserver.port}"))
    events = await asyncio.wait_for(_events(trigger), RUN_TIMEOUT)

    assert [(event.payload["status"], event.payload["state"]) for event in events] == [("success", "succeeded")]
    assert (events[0].payload["name"], events[0].payload["namespace"]) == ("train-abc", "ml")
    # Written again by today's code, it rebuilds into the same trigger (the next upgrade's stored row).
    new_classpath, new_kwargs = trigger.serialize()
    assert json.loads(json.dumps(new_kwargs)) == new_kwargs
    assert import_string(new_classpath)(**new_kwargs).serialize() == (new_classpath, new_kwargs)


async def _events(trigger: Any) -> list[Any]:
    return [event async for event in trigger.run()]
