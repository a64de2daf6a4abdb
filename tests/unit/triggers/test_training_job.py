"""``TrainingJobTrigger``: serialization, and one event for every way a watch can end.

The async hook is replaced at the trigger's boundary (``trigger._hook``) by a fake whose
``job_client()`` yields a ``ScriptedJobClient``; the trigger's own loop, deadlines and error handling run
for real, with poll intervals of milliseconds.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string
from airflow.triggers.base import TriggerEvent
from kubernetes_asyncio.client.exceptions import ApiException

import airflow_provider_disttrain.triggers.training_job as trigger_module
from airflow_provider_disttrain.kinds import get_job_kind
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
from tests.unit.fakes import (
    FAILED_MESSAGE,
    FAILED_REASON,
    FakeAsyncHook,
    ScriptedJobClient,
    epoch,
    failed_status,
    make_job,
    queued_status,
    running_status,
    succeeded_status,
)

EVENT_KEYS = {"status", "kind", "name", "namespace", "state", "message", "job"}
RUN_TIMEOUT = 10.0


def job(status: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return make_job("train-abc", "ml", uid="uid-1", status=status, **kwargs)


QUEUED = job(queued_status(), resource_version="10")
RUNNING = job(running_status(), resource_version="11")
SUCCEEDED = job(succeeded_status(), resource_version="12")
FAILED = job(failed_status(), resource_version="12")


def make_trigger(**overrides: Any) -> TrainingJobTrigger:
    kwargs: dict[str, Any] = {
        "kind": "PyTorchJob",
        "name": "train-abc",
        "namespace": "ml",
        "uid": "uid-1",
        "poll_interval": 0.01,
        "api_failure_tolerance": 60.0,
    }
    kwargs.update(overrides)
    return TrainingJobTrigger(**kwargs)


def scripted(trigger: TrainingJobTrigger, client: ScriptedJobClient, **hook_kwargs: Any) -> FakeAsyncHook:
    """Replace the trigger's hook by a fake that opens ``client``; returns the fake hook."""
    hook = FakeAsyncHook(client, **hook_kwargs)
    trigger._hook = lambda: hook  # type: ignore[method-assign]
    return hook


async def run_once(trigger: TrainingJobTrigger) -> dict[str, Any]:
    """The trigger's single event (it must fire exactly one, and never raise)."""

    async def collect() -> list[TriggerEvent]:
        return [event async for event in trigger.run()]

    events = await asyncio.wait_for(collect(), RUN_TIMEOUT)
    assert len(events) == 1
    payload = events[0].payload
    assert set(payload) == EVENT_KEYS
    assert (payload["kind"], payload["name"], payload["namespace"]) == ("PyTorchJob", "train-abc", "ml")
    json.dumps(payload)  # it is stored in the metadata database
    return payload


# -- serialization ------------------------------------------------------------------------------------------


def test_serialize_round_trips() -> None:
    trigger = TrainingJobTrigger(
        kind="MPIJob",
        name="mpi-1",
        namespace="ml",
        uid="uid-9",
        kubernetes_conn_id="k8s",
        cluster_context="ctx",
        config_dict={"apiVersion": "v1", "clusters": [{"name": "c", "cluster": {"server": "https://k"}}]},
        connection_extras={"namespace": "ml"},
        startup_deadline=1_700_000_000.5,
        execution_deadline=1_700_003_600.0,
        poll_interval=5.0,
        watch_timeout=120,
        api_failure_tolerance=90.0,
        delete_on_kill=False,
    )

    classpath, kwargs = trigger.serialize()

    assert classpath == "airflow_provider_disttrain.triggers.training_job.TrainingJobTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs
    rebuilt = import_string(classpath)(**kwargs)
    assert isinstance(rebuilt, TrainingJobTrigger)
    assert rebuilt.serialize() == (classpath, kwargs)
    # Every constructor parameter travels.
    assert set(kwargs) == set(inspect.signature(TrainingJobTrigger).parameters)


def test_serialize_keeps_the_defaults() -> None:
    classpath, kwargs = TrainingJobTrigger(kind="PyTorchJob", name="a", namespace="b").serialize()

    assert import_string(classpath)(**kwargs).serialize() == (classpath, kwargs)
    assert kwargs["delete_on_kill"] is True
    assert kwargs["uid"] is None


# -- endings -----------------------------------------------------------------------------------------------------


async def test_success_reported_by_the_watch() -> None:
    trigger = make_trigger()
    client = ScriptedJobClient(gets=[RUNNING], watches=[[("ADDED", RUNNING), ("MODIFIED", SUCCEEDED)]])
    hook = scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "success"
    assert event["state"] == "succeeded"
    assert event["message"] == "PyTorchJob ml/train-abc succeeded"
    assert event["job"]["uid"] == "uid-1"
    assert event["job"]["duration_seconds"] == 600.0
    assert client.calls == ["get", "watch"]
    # The watch is one object's, resumed from the version just read.
    assert client.watch_calls[0]["resource_version"] == "11"
    assert client.watch_calls[0]["name"] == "train-abc"
    assert client.watch_calls[0]["kind"] == get_job_kind("PyTorchJob")
    assert client.watch_calls[0]["timeout_seconds"] == 300
    assert (hook.opened, hook.closed) == (1, 1)


async def test_failure_carries_the_failed_condition() -> None:
    trigger = make_trigger()
    scripted(trigger, ScriptedJobClient(gets=[RUNNING], watches=[[("MODIFIED", FAILED)]]))

    event = await run_once(trigger)

    assert event["status"] == "failed"
    assert event["state"] == "failed"
    assert FAILED_REASON in event["message"]
    assert FAILED_MESSAGE in event["message"]


async def test_a_job_already_finished_is_reported_without_watching() -> None:
    trigger = make_trigger()
    client = ScriptedJobClient(gets=[SUCCEEDED])
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "success"
    assert client.calls == ["get"]


async def test_startup_deadline_passed_while_queued_is_a_timeout() -> None:
    trigger = make_trigger(startup_deadline=epoch(-1))
    client = ScriptedJobClient(gets=[QUEUED])
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "timeout"
    assert event["state"] == "queued"
    assert "did not start within startup_timeout" in event["message"]
    assert client.calls == ["get"]


async def test_startup_deadline_ends_the_watch_request_in_time() -> None:
    trigger = make_trigger(startup_deadline=epoch(1))
    # The watch sees nothing and ends (the server honours timeout_seconds); the relist finds it late.
    client = ScriptedJobClient(gets=[QUEUED], watches=[[]], hold=0.05)
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "timeout"
    assert client.watch_calls[0]["timeout_seconds"] == 1  # not the 300 s default


async def test_startup_deadline_does_not_apply_once_running() -> None:
    trigger = make_trigger(startup_deadline=epoch(-60))
    scripted(trigger, ScriptedJobClient(gets=[RUNNING], watches=[[("MODIFIED", SUCCEEDED)]]))

    assert (await run_once(trigger))["status"] == "success"


async def test_execution_deadline_passed_while_running_is_a_timeout() -> None:
    trigger = make_trigger(execution_deadline=epoch(-1))
    scripted(trigger, ScriptedJobClient(gets=[RUNNING]))

    event = await run_once(trigger)

    assert event["status"] == "timeout"
    assert event["state"] == "running"
    assert "execution_timeout" in event["message"]


async def test_execution_deadline_reached_during_the_watch() -> None:
    trigger = make_trigger(execution_deadline=epoch(1))
    client = ScriptedJobClient(gets=[RUNNING], watches=[[("MODIFIED", RUNNING)]], hold=0.05)
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "timeout"
    assert client.watch_calls[0]["timeout_seconds"] == 1


async def test_a_job_deleted_before_the_first_read_is_an_error() -> None:
    trigger = make_trigger()
    scripted(trigger, ScriptedJobClient(gets=[None]))

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert event["state"] is None
    assert event["job"] is None
    assert "no longer exists" in event["message"]


async def test_a_job_deleted_during_the_watch_is_an_error() -> None:
    trigger = make_trigger()
    scripted(trigger, ScriptedJobClient(gets=[RUNNING], watches=[[("DELETED", RUNNING)]]))

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert "was deleted outside this task" in event["message"]
    assert event["job"]["name"] == "train-abc"


async def test_a_job_recreated_under_the_same_name_is_an_error() -> None:
    trigger = make_trigger()
    client = ScriptedJobClient(gets=[make_job("train-abc", "ml", uid="uid-2", status=running_status())])
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert "uid uid-2, expected uid-1" in event["message"]
    assert client.calls == ["get"]


@pytest.mark.parametrize(("status", "reason"), [(401, "Unauthorized"), (403, "Forbidden")])
async def test_a_refused_request_is_an_error_naming_the_status(status: int, reason: str) -> None:
    trigger = make_trigger()
    client = ScriptedJobClient(gets=[ApiException(status=status, reason=reason)])
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert f"({status} {reason})" in event["message"]
    assert "RBAC" in event["message"]
    assert client.calls == ["get"]  # not retried


async def test_a_watch_refused_for_longer_than_the_grace_is_an_error(monkeypatch) -> None:
    monkeypatch.setattr(trigger_module, "_ACCESS_DENIED_GRACE_SECONDS", 0.5)
    trigger = make_trigger()
    refused = ApiException(status=403, reason="Forbidden")
    scripted(trigger, ScriptedJobClient(gets=[RUNNING], watches=[refused] * 10))

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert "403" in event["message"]
    assert event["state"] == "running"  # the last job seen


async def test_410_gone_relists_and_watches_again() -> None:
    trigger = make_trigger()
    relisted = job(running_status(), resource_version="500")
    client = ScriptedJobClient(
        gets=[RUNNING, relisted],
        watches=[ApiException(status=410, reason="Expired"), [("MODIFIED", SUCCEEDED)]],
    )
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "success"
    assert client.calls == ["get", "watch", "get", "watch"]
    assert [call["resource_version"] for call in client.watch_calls] == ["11", "500"]


async def test_410_gone_mid_stream_relists_too() -> None:
    trigger = make_trigger()
    client = ScriptedJobClient(
        gets=[RUNNING, RUNNING],
        watches=[[("MODIFIED", RUNNING), ApiException(status=410)], [("MODIFIED", SUCCEEDED)]],
    )
    scripted(trigger, client)

    assert (await run_once(trigger))["status"] == "success"
    assert client.calls == ["get", "watch", "get", "watch"]


async def test_transient_errors_are_retried() -> None:
    trigger = make_trigger()
    client = ScriptedJobClient(
        gets=[ApiException(status=503), ConnectionResetError("reset by peer"), RUNNING, RUNNING],
        watches=[ApiException(status=500), [("MODIFIED", SUCCEEDED)]],
    )
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "success"
    assert client.calls == ["get", "get", "get", "watch", "get", "watch"]


async def test_failed_reads_do_not_switch_to_polling() -> None:
    """An API server restart fails a few reads; the trigger must go back to watching, not poll for hours."""
    trigger = make_trigger()
    client = ScriptedJobClient(
        gets=[ApiException(status=503), ApiException(status=503), ConnectionResetError(), RUNNING],
        watches=[[("MODIFIED", SUCCEEDED)]],
    )
    scripted(trigger, client)

    assert (await run_once(trigger))["status"] == "success"
    assert client.calls == ["get", "get", "get", "get", "watch"]


async def test_a_watch_ending_normally_is_renewed() -> None:
    trigger = make_trigger()
    client = ScriptedJobClient(gets=[RUNNING, RUNNING], watches=[[("MODIFIED", RUNNING)], [("MODIFIED", SUCCEEDED)]])
    scripted(trigger, client)

    assert (await run_once(trigger))["status"] == "success"
    assert client.calls == ["get", "watch", "get", "watch"]


async def test_a_watch_that_keeps_breaking_falls_back_to_polling() -> None:
    trigger = make_trigger()
    broken = ConnectionResetError("watch stream reset")
    client = ScriptedJobClient(
        gets=[RUNNING, RUNNING, RUNNING, RUNNING, RUNNING, RUNNING, SUCCEEDED],
        watches=[broken, broken, broken, [("MODIFIED", SUCCEEDED)]],
    )
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "success"
    assert client.calls.count("watch") == 3
    # After the third broken watch only reads remain.
    last_watch = len(client.calls) - 1 - client.calls[::-1].index("watch")
    assert client.calls[last_watch + 1 :] == ["get"] * 4


async def test_polling_still_honours_the_deadlines() -> None:
    trigger = make_trigger(execution_deadline=epoch(1))
    broken = ConnectionResetError("watch stream reset")
    client = ScriptedJobClient(gets=[RUNNING], watches=[broken, broken, broken])
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "timeout"
    # After three broken watches it polls (30 reads) before it tries a watch again.
    third_watch = [index for index, call in enumerate(client.calls) if call == "watch"][2]
    assert client.calls[third_watch + 1 : third_watch + 31] == ["get"] * 30


async def test_an_api_down_for_longer_than_the_tolerance_is_an_error() -> None:
    trigger = make_trigger(api_failure_tolerance=0.2)
    client = ScriptedJobClient(gets=[ConnectionRefusedError("connection refused")])
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert "lost contact with the API server" in event["message"]
    assert "connection refused" in event["message"]
    assert client.calls.count("get") > 1  # retried until the tolerance ran out


async def test_an_outage_keeps_the_last_job_seen_in_the_event() -> None:
    trigger = make_trigger(api_failure_tolerance=0.1)
    client = ScriptedJobClient(gets=[RUNNING, ApiException(status=503)], watches=[ApiException(status=503)])
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert event["state"] == "running"
    assert event["job"]["uid"] == "uid-1"


async def test_an_unexpected_exception_is_an_error_event() -> None:
    trigger = make_trigger(kind="NoSuchJob")
    scripted(trigger, ScriptedJobClient(gets=[RUNNING]))

    events = [event async for event in trigger.run()]

    assert len(events) == 1
    assert events[0].payload["status"] == "error"
    assert "watching NoSuchJob ml/train-abc failed" in events[0].payload["message"]
    assert "unknown job kind" in events[0].payload["message"]


async def test_a_hook_that_cannot_connect_is_an_error_event() -> None:
    trigger = make_trigger()
    scripted(trigger, ScriptedJobClient(), enter_error=RuntimeError("no kubeconfig found"))

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert "no kubeconfig found" in event["message"]


async def test_a_malformed_answer_ends_in_an_error_event() -> None:
    trigger = make_trigger(api_failure_tolerance=0.05)
    scripted(trigger, ScriptedJobClient(gets=[{"metadata": "not a mapping"}]))

    event = await run_once(trigger)

    assert event["status"] == "error"


async def test_the_client_is_opened_once_per_run() -> None:
    """One connection for the trigger's whole life, however many reads and watches it makes."""
    trigger = make_trigger()
    opened_hooks: list[FakeAsyncHook] = []
    client = ScriptedJobClient(
        gets=[RUNNING, ApiException(status=503), RUNNING, RUNNING, RUNNING],
        watches=[[("MODIFIED", RUNNING)], ApiException(status=410), [("MODIFIED", SUCCEEDED)]],
    )

    def new_hook() -> FakeAsyncHook:
        opened_hooks.append(FakeAsyncHook(client))
        return opened_hooks[-1]

    trigger._hook = new_hook  # type: ignore[method-assign]

    assert (await run_once(trigger))["status"] == "success"
    assert client.calls.count("get") >= 3
    assert len(opened_hooks) == 1
    assert (opened_hooks[0].opened, opened_hooks[0].closed) == (1, 1)


# -- on_kill -------------------------------------------------------------------------------------------------------


async def test_on_kill_deletes_the_job_with_its_uid() -> None:
    trigger = make_trigger(delete_on_kill=True)
    client = ScriptedJobClient()
    hook = scripted(trigger, client)

    await trigger.on_kill()

    assert client.delete_calls == [(get_job_kind("PyTorchJob"), "train-abc", "ml", "uid-1")]
    assert hook.opened == 1


async def test_on_kill_leaves_the_job_when_asked_to() -> None:
    trigger = make_trigger(delete_on_kill=False)
    client = ScriptedJobClient()
    hook = scripted(trigger, client)

    await trigger.on_kill()

    assert client.delete_calls == []
    assert hook.opened == 0


async def test_a_non_transient_error_ends_the_wait_at_once() -> None:
    trigger = make_trigger(api_failure_tolerance=300)
    client = ScriptedJobClient(gets=[RUNNING], watches=[ApiException(status=404, reason="Not Found")])
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "error"
    assert "404" in event["message"] or "Not Found" in event["message"]
    assert client.calls == ["get", "watch"]


async def test_a_short_refusal_after_access_worked_is_retried(monkeypatch) -> None:
    """An API server that just restarted answers 403 until its RBAC caches have synced."""
    monkeypatch.setattr(trigger_module.asyncio, "sleep", _no_sleep)
    trigger = make_trigger()
    refused = ApiException(status=403, reason="Forbidden")
    client = ScriptedJobClient(gets=[RUNNING, refused, SUCCEEDED], watches=[ConnectionResetError("restart")])
    scripted(trigger, client)

    event = await run_once(trigger)

    assert event["status"] == "success"
    assert client.calls.count("get") == 3


async def _no_sleep(_seconds: float) -> None:
    return None
