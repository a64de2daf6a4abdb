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
import logging
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string

from airflow_provider_disttrain.job.deadlines import Deadlines
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.triggers.stored_kwargs import FLAT_KEYS
from airflow_provider_disttrain.utils.clock import LoopClock
from tests.unit.fakes import make_job, running_status, succeeded_status

FIXTURES = Path(__file__).parents[2] / "fixtures" / "triggers"
STORED_FORMATS = sorted(FIXTURES.glob("*.json"))
NEWEST = max(path.name.split("-", 1)[0] for path in STORED_FORMATS)
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
    for prefix in ("v0", "v1", "v2"):
        names = {path.name.split("-", 1)[1] for path in STORED_FORMATS if path.name.startswith(f"{prefix}-")}
        assert {"labelled_job.json", "name_watch.json", "stream_logs.json", "kueue.json"} <= names
        assert "config_dict_shipped.json" in names
    # The operator's and the sensor's rows as the last flat format (main at 32c71f4) and today write them.
    for prefix in ("v1", "v2"):
        for name in ("operator_deadlines_and_policies", "operator_defaults", "sensor_unlabelled"):
            assert (FIXTURES / f"{prefix}-{name}.json").exists()


def test_the_newest_stored_format_is_todays_row() -> None:
    """A change to ``serialize()`` comes with a new prefix of stored rows (the README of the fixtures)."""
    classpath, kwargs = stored(FIXTURES / f"{NEWEST}-labelled_job.json")
    today_classpath, today_kwargs = import_string(classpath)(**kwargs).serialize()

    assert today_classpath == classpath
    assert sorted(today_kwargs) == sorted(kwargs)


def _connect_stored_connection_id(apiserver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # The stored connection id names a connection the triggerer reads (as the cncf triggers do).
    extra = {"kube_config": json.dumps(apiserver.kubeconfig()), "namespace": "ml"}
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{STORED_CONNECTION_ID.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )


async def _rebuilt_and_run(apiserver: Any, classpath: str, kwargs: dict[str, Any]) -> tuple[Any, list[Any]]:
    """The trigger rebuilt from a row as Airflow's triggerer does (``trigger_class(**kwargs)``), run
    against the fake API server until its job (which has succeeded) is reported."""
    labelled = kwargs.get("uid") is not None  # an operator's job carries the label; a sensor's need not
    labels = {TASK_INSTANCE_LABEL: "abc123"} if labelled else {}
    await apiserver.put(make_job("train-abc", "ml", uid="uid-1", status=succeeded_status(), labels=labels))
    trigger = import_string(classpath)(**pointed_at(kwargs, f"http://127.0.0.1:{apiserver.port}"))
    return trigger, await asyncio.wait_for(_events(trigger), RUN_TIMEOUT)


@pytest.mark.parametrize("path", STORED_FORMATS, ids=[path.stem for path in STORED_FORMATS])
async def test_a_stored_trigger_rebuilds_and_sees_its_job_succeed(
    path: Path, apiserver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _connect_stored_connection_id(apiserver, monkeypatch)
    classpath, kwargs = stored(path)

    trigger, events = await _rebuilt_and_run(apiserver, classpath, kwargs)

    assert [(event.payload["status"], event.payload["state"]) for event in events] == [("success", "succeeded")]
    assert (events[0].payload["name"], events[0].payload["namespace"]) == ("train-abc", "ml")
    # Written again by today's code, it rebuilds into the same trigger (the next upgrade's stored row).
    new_classpath, new_kwargs = trigger.serialize()
    assert json.loads(json.dumps(new_kwargs)) == new_kwargs
    assert import_string(new_classpath)(**new_kwargs).serialize() == (new_classpath, new_kwargs)


async def _events(trigger: Any) -> list[Any]:
    return [event async for event in trigger.run()]


async def test_a_row_written_by_a_newer_version_is_waited_on_without_its_unknown_keys(
    apiserver: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Rolling upgrade, newer worker to older triggerer: today's row plus keys a later version may add
    (beside the others and inside the connection) rebuilds with a warning naming them, and waits."""
    _connect_stored_connection_id(apiserver, monkeypatch)
    classpath, kwargs = stored(FIXTURES / f"{NEWEST}-labelled_job.json")
    # The trigger's own logger (Airflow's structlog) does not reach caplog; a stdlib one does.
    monkeypatch.setattr(import_string(classpath), "log", logging.getLogger("tests.stored_trigger"))
    newer = {
        **kwargs,
        "retry_budget": {"attempts": 3},
        "connection": {**kwargs["connection"], "deployment": "prod"},
        "wait_policy": {**kwargs["wait_policy"], "jitter": 0.1},
    }

    with caplog.at_level(logging.WARNING):
        trigger, events = await _rebuilt_and_run(apiserver, classpath, newer)

    assert [event.payload["status"] for event in events] == ["success"]
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert any("['retry_budget']" in message and "newer version" in message for message in warnings)
    assert any("['deployment']" in message and "newer version" in message for message in warnings)
    assert any("wait_policy keys ['jitter']" in message and "newer version" in message for message in warnings)
    # What it writes again is today's row: the unknown keys are not carried on.
    assert trigger.serialize() == (classpath, pointed_at(kwargs, f"http://127.0.0.1:{apiserver.port}"))


def test_a_typo_in_a_connection_built_in_code_is_still_refused() -> None:
    from airflow_provider_disttrain.kube.connection import ClusterConnection

    with pytest.raises(ValueError, match="unknown keys \\['conn_idd'\\]"):
        ClusterConnection.from_dict({"conn_idd": "k8s"})


REQUIRED_KWARGS = ("kind", "name", "namespace")
TODAYS_KWARGS = set(stored(FIXTURES / f"{NEWEST}-labelled_job.json")[1])
# The typed values and their flat mirrors (``stored_kwargs.FLAT_KEYS``) each carry a field twice: a row
# without one copy still has the other (``test_a_row_with_one_copy_of_a_field_keeps_it``).
TYPED_AND_FLAT_KWARGS = {"deadlines", "wait_policy", "cleanup_policy", *FLAT_KEYS}
TODAYS_OPTIONAL_KWARGS = sorted(TODAYS_KWARGS - set(REQUIRED_KWARGS) - TYPED_AND_FLAT_KWARGS)


@pytest.mark.parametrize("missing", sorted(TYPED_AND_FLAT_KWARGS))
def test_a_row_with_one_copy_of_a_field_keeps_it(missing: str) -> None:
    """A v1 row has only the flat keys; a row of a later version might keep only the typed values: either
    copy alone rebuilds the same trigger."""
    classpath, kwargs = stored(FIXTURES / f"{NEWEST}-operator_deadlines_and_policies.json")
    trigger_class = import_string(classpath)
    one_copy = {key: value for key, value in kwargs.items() if key != missing}

    rebuilt = trigger_class(**one_copy).serialize()[1]

    if missing in FLAT_KEYS:
        assert rebuilt == kwargs
    else:  # the typed value's fields a v1 row carried flat; its others (the cleanup on finish) take defaults
        mirrored = [(flat, field) for flat, (key, field) in FLAT_KEYS.items() if key == missing]
        assert [(rebuilt[flat], rebuilt[missing][field]) for flat, field in mirrored] == [
            (kwargs[flat], kwargs[missing][field]) for flat, field in mirrored
        ]
        assert {key: value for key, value in rebuilt.items() if key != missing} == one_copy


@pytest.mark.parametrize("missing", TODAYS_OPTIONAL_KWARGS)
def test_a_row_written_by_an_older_version_without_a_newer_key_takes_its_default(missing: str) -> None:
    """Rolling upgrade, older worker to newer triggerer: a row without a key that came later rebuilds
    with that key's default (the class's own, as a trigger made in code without it would have)."""
    classpath, kwargs = stored(FIXTURES / f"{NEWEST}-labelled_job.json")
    trigger_class = import_string(classpath)
    older = {key: value for key, value in kwargs.items() if key != missing}

    rebuilt = trigger_class(**older).serialize()[1]

    defaults = trigger_class(**{key: kwargs[key] for key in REQUIRED_KWARGS}).serialize()[1]
    assert rebuilt[missing] == defaults[missing]
    assert {key: value for key, value in rebuilt.items() if key != missing} == older


async def test_a_row_with_only_the_required_keys_waits_for_its_job(
    apiserver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _connect_stored_connection_id(apiserver, monkeypatch)
    classpath, kwargs = stored(FIXTURES / "v1-name_watch.json")
    oldest = {**{key: kwargs[key] for key in REQUIRED_KWARGS}, "connection": kwargs["connection"]}

    _, events = await _rebuilt_and_run(apiserver, classpath, oldest)

    assert [event.payload["status"] for event in events] == ["success"]


OPERATOR_DEADLINES = Deadlines(startup=1_900_000_000.0, queue=1_900_000_600.0, execution=1_900_007_200.0)


@pytest.mark.parametrize("prefix", ["v1", "v2"])
def test_the_deadlines_and_policies_of_a_stored_row_come_back_whole(prefix: str) -> None:
    """The last flat row (32c71f4) and today's row of one deferral rebuild into the same typed values."""
    classpath, kwargs = stored(FIXTURES / f"{prefix}-operator_deadlines_and_policies.json")

    trigger = import_string(classpath)(**kwargs)

    assert trigger.deadlines == OPERATOR_DEADLINES
    assert (trigger.wait_policy.poll_seconds, trigger.wait_policy.progress_seconds) == (0.05, 120.0)
    assert trigger.wait_policy.api_failure_tolerance_seconds == 600.0
    assert trigger.cleanup_policy.on_kill is False
    sensor = import_string(classpath)(**stored(FIXTURES / f"{prefix}-sensor_unlabelled.json")[1])
    assert sensor.deadlines == Deadlines(execution=1_900_003_600.0)
    assert (sensor.cleanup_policy.on_kill, sensor.uid) == (False, None)


@pytest.mark.parametrize(
    ("name", "deadline"),
    [("operator_deadlines_and_policies", OPERATOR_DEADLINES.execution), ("sensor_unlabelled", 1_900_003_600.0)],
)
@pytest.mark.parametrize("prefix", ["v1", "v2"])
async def test_a_stored_row_ends_a_running_job_at_its_stored_execution_deadline(
    prefix: str, name: str, deadline: float, virtual_clock: LoopClock, apiserver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rebuilt from the row, the trigger waits for the running job until the row's execution deadline
    (the clock set shortly before it), then reports the timeout. (The virtual clock before the API
    server: the server's teardown runs on virtual time too.)"""
    _connect_stored_connection_id(apiserver, monkeypatch)
    classpath, kwargs = stored(FIXTURES / f"{prefix}-{name}.json")
    labels = {TASK_INSTANCE_LABEL: "abc123"} if kwargs.get("uid") else {}
    await apiserver.put(make_job("train-abc", "ml", uid="uid-1", status=running_status(), labels=labels))
    trigger = import_string(classpath)(**kwargs)
    trigger.clock = LoopClock(asyncio.get_running_loop(), epoch_at_start=deadline - 60)
    begun = virtual_clock.monotonic()

    events = await asyncio.wait_for(_events(trigger), 600)

    assert [(event.payload["status"], event.payload["state"]) for event in events] == [("timeout", "running")]
    assert "execution_timeout" in events[0].payload["message"]
    assert virtual_clock.monotonic() - begun == pytest.approx(60, abs=1)


@pytest.mark.parametrize("name", ["operator_deadlines_and_policies", "sensor_unlabelled"])
def test_todays_row_keeps_the_job_on_kill_for_an_older_triggerer_too(name: str) -> None:
    """Rolling upgrade, newer worker to older triggerer: the older one ignores ``cleanup_policy`` and
    reads only the flat ``delete_on_kill`` (its default: delete). A row that keeps the job on kill (a
    sensor's: the job is not the task's) says so flat as well, so no version deletes it."""
    classpath, kwargs = stored(FIXTURES / f"{NEWEST}-{name}.json")

    rewritten = import_string(classpath)(**kwargs).serialize()[1]

    assert (rewritten["delete_on_kill"], rewritten["cleanup_policy"]["on_kill"]) == (False, False)


@pytest.mark.parametrize("name", ["operator_deadlines_and_policies", "operator_defaults", "sensor_unlabelled"])
def test_todays_row_gives_an_older_triggerer_the_same_deadlines_and_policies(name: str) -> None:
    """Rolling upgrade or downgrade, newer worker to older triggerer: the v1 trigger reads its deadlines and
    policies only from flat keys (it ignores ``deadlines``, ``wait_policy`` and ``cleanup_policy`` with a
    warning). Today's row carries every key of the v1 row made the same way, each with the value of the
    typed field it became, so the older triggerer waits with the same startup, queue and execution
    deadlines, poll and progress intervals, tolerance of API failures and kill policy."""
    _, v1 = stored(FIXTURES / f"v1-{name}.json")
    classpath, kwargs = stored(FIXTURES / f"{NEWEST}-{name}.json")
    rewritten = import_string(classpath)(**kwargs).serialize()[1]

    assert set(v1) <= set(rewritten), sorted(set(v1) - set(rewritten))
    for flat_key, (key, field) in FLAT_KEYS.items():
        assert rewritten[flat_key] == rewritten[key][field] == v1[flat_key], flat_key
