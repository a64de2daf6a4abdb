"""``stream_logs``: the trigger follows the leader's log into its own log while the job runs.

The trigger runs for real against the fake API server, whose pods' logs are streamed with
``follow=true`` the way the kubelet streams them (open until the container ends).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, MutableMapping
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import structlog

from airflow_provider_disttrain.hooks.cluster_client import MAX_LOG_STREAMS
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.pods.live_logs import (
    LOG_POSITION_ANNOTATION,
    ByteBudget,
    decode_position,
    encode_position,
)
from airflow_provider_disttrain.pods.logs import LogCursor
from tests.unit.fakes import make_job, make_pod, running_status, succeeded_status
from tests.unit.triggers.helpers import job, make_trigger, run_once, started
from tests.unit.waiting import until

# Trigger and watch stories run on virtual time (tests/unit/conftest.py: virtual_clock).
pytestmark = pytest.mark.usefixtures("virtual_clock")

NAMESPACE = "ml"
MASTER = "train-abc-master-0"


@pytest.fixture
def logged() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as events:
        yield events


def said(events: list[MutableMapping[str, Any]], prefix: str = f"[{MASTER}] ") -> list[str]:
    lines = [str(e["event"]) % tuple(e.get("positional_args", ())) for e in events]
    return [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]


def stamped(*texts: str, start: datetime | None = None) -> list[str]:
    begin = start or datetime.now(timezone.utc) - timedelta(seconds=5)
    return [
        f"{(begin + timedelta(milliseconds=i)).isoformat().replace('+00:00', 'Z')} {t}" for i, t in enumerate(texts)
    ]


def add_pods(apiserver: Any) -> None:
    apiserver.add_pod(make_pod("train-abc", "master", 0, namespace=NAMESPACE))
    apiserver.add_pod(make_pod("train-abc", "worker", 0, namespace=NAMESPACE))


async def test_the_leaders_lines_are_written_while_the_job_runs_and_the_position_is_kept(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    add_pods(apiserver)
    await apiserver.add_log_lines(NAMESPACE, "train-abc-worker-0", *stamped("a worker's line"))
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped("epoch 1 loss=0.5"))
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, stream_logs=True), apiserver)

    await until(lambda: said(logged) == ["epoch 1 loss=0.5"])  # while the job runs
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped("epoch 2 loss=0.25", "training finished"))
    await until(lambda: len(said(logged)) == 3)
    await apiserver.end_log(NAMESPACE, MASTER)
    await apiserver.put(job(succeeded_status()))
    event = await task

    assert event["status"] == "success"
    assert said(logged) == ["epoch 1 loss=0.5", "epoch 2 loss=0.25", "training finished"]
    assert said(logged, "[train-abc-worker-0] ") == []
    # One stream, and the position where it ended is on the job for whoever reads on.
    assert [q["follow"] for q in apiserver.queries("log")] == ["True"]
    annotation = apiserver.objects[(NAMESPACE, "pytorchjobs", "train-abc")]["metadata"]["annotations"]
    pod, cursor = decode_position(annotation[LOG_POSITION_ANNOTATION])
    assert (pod, cursor.count) == (MASTER, 1)
    assert apiserver.open_log_streams == 0


async def test_a_new_trigger_goes_on_from_the_saved_position_instead_of_the_start(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    """What a triggerer restart looks like: the earlier trigger saved its position, a new one starts."""
    add_pods(apiserver)
    lines = stamped("line 1", "line 2", "line 3")
    await apiserver.add_log_lines(NAMESPACE, MASTER, *lines)
    earlier = stamped("line 1", "line 2", start=datetime.fromisoformat(lines[0].split(" ")[0].replace("Z", "+00:00")))
    last_written = datetime.fromisoformat(earlier[-1].split(" ")[0].replace("Z", "+00:00"))
    position = encode_position(MASTER, LogCursor(int(last_written.timestamp() * 1_000_000) * 1000, 1))
    running = job(running_status())
    running["metadata"]["annotations"] = {LOG_POSITION_ANNOTATION: position}
    await apiserver.put(running)
    task = await started(make_trigger(apiserver, stream_logs=True), apiserver)

    await until(lambda: said(logged) == ["line 3"])
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped("line 4", start=datetime.now(timezone.utc)))
    await until(lambda: said(logged) == ["line 3", "line 4"])
    await apiserver.end_log(NAMESPACE, MASTER)
    await apiserver.put({**running, "status": succeeded_status()})
    assert (await task)["status"] == "success"

    assert said(logged) == ["line 3", "line 4"]
    # Only from the position's second on, as the node's clock stamped it (not counted back on the triggerer's).
    assert apiserver.queries("log")[0]["sinceTime"] == last_written.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_over_the_byte_budget_lines_are_dropped_with_a_note(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    add_pods(apiserver)
    burst = [f"step {i} " + "x" * 90 for i in range(50)]  # 5 KB at once
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped(*burst))
    await apiserver.end_log(NAMESPACE, MASTER)
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, stream_logs=True, stream_logs_bytes_per_second=1000), apiserver)
    await until(lambda: any("left out" in line for line in said(logged, "")))
    await apiserver.put(job(succeeded_status()))
    assert (await task)["status"] == "success"

    written = [line for line in said(logged) if "left out" not in line]
    # About one second's budget (1000 bytes, ~98 bytes a line), more if the stream took longer.
    assert 5 <= len(written) < 50
    assert [line for line in burst if line in written] == written  # in order, none twice
    notes = [line for line in said(logged, "") if "left out" in line]
    dropped = [int(note.split("] ", 1)[1].split(" ", 1)[0]) for note in notes]
    assert sum(dropped) + len(written) == 50, notes
    assert all(note.endswith("over stream_logs' 1000 bytes per second") for note in notes)


async def test_off_by_default_no_pod_or_log_request(apiserver: Any, logged: list[MutableMapping[str, Any]]) -> None:
    add_pods(apiserver)
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped("epoch 1"))
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver), apiserver)
    await asyncio.sleep(0.2)
    await apiserver.put(job(succeeded_status()))
    assert (await task)["status"] == "success"

    assert (apiserver.count("pods"), apiserver.count("log"), apiserver.count("patch")) == (0, 0, 0)
    assert said(logged) == []


def test_position_and_budget_helpers() -> None:
    assert decode_position(encode_position("p-0", LogCursor(12, 3))) == ("p-0", LogCursor(12, 3))
    assert decode_position("garbage") is None and decode_position(None) is None
    budget = ByteBudget(100)
    assert budget.take(100, now=0.0) and not budget.take(1, now=0.0)
    assert budget.take(50, now=0.5) and not budget.take(1, now=0.5)
    with pytest.raises(ValueError, match="stream_logs_bytes_per_second"):
        ByteBudget(0)


async def test_a_finished_leader_is_not_asked_again_while_the_workers_run(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    apiserver.add_pod(make_pod("train-abc", "master", 0, namespace=NAMESPACE, phase="Succeeded"))
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped("done"))
    await apiserver.end_log(NAMESPACE, MASTER)
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, stream_logs=True), apiserver)
    await until(lambda: said(logged) == ["done"])
    await asyncio.sleep(2.5)  # past the first retry interval

    assert (apiserver.count("pods"), apiserver.count("log")) == (1, 1)
    await apiserver.put(job(succeeded_status()))
    assert (await task)["status"] == "success"


async def test_a_refused_position_patch_does_not_stop_the_stream(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    add_pods(apiserver)
    apiserver.fail_next("patch", 403, count=5, reason="Forbidden")
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped("epoch 1"))
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, stream_logs=True), apiserver)
    await until(lambda: said(logged) == ["epoch 1"])
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped("epoch 2", start=datetime.now(timezone.utc)))
    await until(lambda: said(logged) == ["epoch 1", "epoch 2"])
    await apiserver.end_log(NAMESPACE, MASTER)
    await apiserver.put(job(succeeded_status()))
    assert (await task)["status"] == "success"

    assert apiserver.count("log") == 1  # one stream throughout
    notes = [line for line in said(logged, "") if "Could not record the log position" in line]
    assert len(notes) == 1, notes


async def test_streams_on_one_cluster_are_capped_so_the_shared_client_keeps_connections_free(
    apiserver: Any, logged: list[MutableMapping[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import airflow_provider_disttrain.hooks.cluster_client as cluster_client
    from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
    from tests.unit.fakes import make_job

    monkeypatch.setattr(cluster_client, "MAX_LOG_STREAMS", 1)
    add_pods(apiserver)
    apiserver.add_pod(make_pod("train-def", "master", 0, namespace=NAMESPACE))
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped("first job"))
    await apiserver.add_log_lines(NAMESPACE, "train-def-master-0", *stamped("second job"))
    second = make_job("train-def", NAMESPACE, uid="uid-2", status=running_status(), labels={TASK_INSTANCE_LABEL: "d"})
    await apiserver.put(job(running_status()))
    await apiserver.put(second)
    first_task = await started(make_trigger(apiserver, stream_logs=True), apiserver)
    second_task = asyncio.create_task(
        asyncio.wait_for(anext(make_trigger(apiserver, name="train-def", uid="uid-2", stream_logs=True).run()), 10)
    )
    await until(lambda: said(logged) == ["first job"])
    await asyncio.sleep(0.5)
    assert apiserver.open_log_streams == 1
    assert said(logged, "[train-def-master-0] ") == []  # waiting for the one slot

    await apiserver.end_log(NAMESPACE, MASTER)  # the first stream ends: the slot goes to the second job
    await until(lambda: said(logged, "[train-def-master-0] ") == ["second job"])
    assert apiserver.open_log_streams == 1
    await apiserver.end_log(NAMESPACE, "train-def-master-0")
    await apiserver.put(job(succeeded_status()))
    await apiserver.put({**second, "status": succeeded_status()})
    assert (await first_task)["status"] == "success"
    assert (await second_task).payload["status"] == "success"


async def test_cancelled_triggers_leave_nothing_running(apiserver: Any) -> None:
    """Cleared, marked failed, moved to another triggerer: 300 streaming triggers cancelled at once leave no
    task, stream, session or request behind (the follower used to outlive its trigger, listing pods and
    rebuilding the client the registry had closed)."""
    import gc

    import aiohttp

    names = [f"train-{index:03d}" for index in range(300)]
    for name in names:
        apiserver.add_pod(make_pod(name, "master", 0, namespace=NAMESPACE))
        await apiserver.add_log_lines(NAMESPACE, f"{name}-master-0", *stamped(f"{name} epoch 1"))
        labelled = make_job(
            name, NAMESPACE, uid=f"uid-{name}", status=running_status(), labels={TASK_INSTANCE_LABEL: name}
        )
        await apiserver.put(labelled)
    before = asyncio.all_tasks()
    gc.collect()
    sessions_before = {id(s) for s in gc.get_objects() if type(s) is aiohttp.ClientSession}  # other tests'
    tasks = [
        asyncio.create_task(run_once(make_trigger(apiserver, name=name, uid=f"uid-{name}", stream_logs=True)))
        for name in names
    ]
    # 300 triggers' real loopback I/O: on a loaded machine much virtual time passes meanwhile.
    await until(lambda: apiserver.open_log_streams == MAX_LOG_STREAMS, within=3600)  # the rest wait

    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await until(lambda: asyncio.all_tasks() <= before, within=3600)  # the watch lingers, then closes its client
    requests = len(apiserver.requests)
    await asyncio.sleep(120)  # past every retry interval of a follower

    assert asyncio.all_tasks() <= before
    assert apiserver.open_log_streams == 0 and apiserver.open_watches == 0
    assert len(apiserver.requests) == requests
    gc.collect()
    open_sessions = [s for s in gc.get_objects() if type(s) is aiohttp.ClientSession and not s.closed]
    assert [s for s in open_sessions if id(s) not in sessions_before] == []


async def test_the_followers_requests_get_the_hooks_retry_and_renew_credentials_on_401(
    apiserver: Any, logged: list[MutableMapping[str, Any]]
) -> None:
    """Issue 16: live_logs listed pods, streamed and patched with kubernetes_asyncio directly, without the
    hooks' retry of transient answers or a client renewal on 401."""
    from airflow_provider_disttrain.hooks.watch_registry import registry

    add_pods(apiserver)
    await apiserver.add_log_lines(NAMESPACE, MASTER, *stamped("epoch 1 loss=0.5"))
    apiserver.fail_next("pods", 503, reason="ServiceUnavailable")  # retried within the same try
    apiserver.fail_next("log", 401, reason="Unauthorized")  # the token expired: a renewed client goes on
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver, stream_logs=True), apiserver)

    await until(lambda: said(logged) == ["epoch 1 loss=0.5"])
    [cluster] = registry().clusters.values()
    await apiserver.end_log(NAMESPACE, MASTER)
    await apiserver.put(job(succeeded_status()))

    assert (await task)["status"] == "success"
    assert apiserver.count("pods") >= 3  # the 503, its retry, and the list after the 401
    assert cluster.generation >= 2
    assert not [e for e in logged if "ServiceUnavailable" in str(e.get("event"))]  # the retry kept it quiet
