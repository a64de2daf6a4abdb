"""``ClusterClient``: a kubeconfig exec credential plugin that fails or hangs never stalls or fails a wait.

The plugin is a real one (a script kubernetes_asyncio runs as the kubeconfig's ``users[].user.exec``,
as it runs aws, gcloud or kubelogin), told by a file what to do on its next run: issue the token, fail
once (exit 1, as a throttled STS call does), or hang. Requests go to the fake API server, which accepts
the token the plugin issues.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as async_client

import airflow_provider_disttrain.hooks.cluster_client as cluster_client
import airflow_provider_disttrain.hooks.watch_registry as watch_registry
from airflow_provider_disttrain.hooks.api_errors import is_transient
from airflow_provider_disttrain.hooks.cluster_client import ClusterClient
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger
from tests.unit.fakes import ManualClock, make_job, running_status, succeeded_status
from tests.unit.waiting import until

# The plugin's next run: "ok" issues the token, "fail-once" exits 1 and then issues it, "hang" sleeps.
PLUGIN = """
import json, pathlib, sys, time
state = pathlib.Path(sys.argv[1])
runs = state.with_name("runs")
runs.write_text(runs.read_text() + "run\\n" if runs.exists() else "run\\n")
mode = state.read_text().strip()
if mode == "hang":
    time.sleep(30)
if mode == "fail-once":
    state.write_text("ok")
    sys.stderr.write("ThrottlingException: Rate exceeded")
    sys.exit(1)
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": "good-token"}}))
"""


class Plugin:
    def __init__(self, directory: Path) -> None:
        self.script = directory / "plugin.py"
        self.script.write_text(PLUGIN)
        self.state = directory / "state"
        self.state.write_text("ok")
        self.runs_file = directory / "runs"

    def next_run(self, mode: str) -> None:
        self.state.write_text(mode)

    @property
    def runs(self) -> int:
        return self.runs_file.read_text().count("run") if self.runs_file.exists() else 0


@pytest.fixture
def plugin(tmp_path: Path) -> Plugin:
    return Plugin(tmp_path)


def exec_connection(apiserver: Any, plugin: Plugin) -> ClusterConnection:
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(plugin.script), str(plugin.state)],
            "interactiveMode": "Never",
        }
    }
    return ClusterConnection(kubeconfig=apiserver.kubeconfig(user=user))


async def read_job(cluster: ClusterClient) -> tuple[str, int]:
    """One request through a lease: the job's name and the client generation that served it."""
    async with cluster.lease() as (api, generation):
        job = await async_client.CustomObjectsApi(api).get_namespaced_custom_object(
            "kubeflow.org", "v1", "ml", "pytorchjobs", "train-abc"
        )
        return job["metadata"]["name"], generation


@pytest.fixture
async def job(apiserver: Any) -> None:
    await apiserver.put(make_job("train-abc", "ml", status=running_status(), labels={TASK_INSTANCE_LABEL: "t"}))


async def test_a_plugin_hanging_in_the_periodic_rebuild_blocks_no_request(
    apiserver: Any, job: None, plugin: Plugin
) -> None:
    cluster = ClusterClient(exec_connection(apiserver, plugin), max_age=0.0)  # every lease finds it due
    try:
        assert await read_job(cluster) == ("train-abc", 1)
        plugin.next_run("hang")

        # Requests go on with the current client while the rebuild waits for the plugin.
        for _ in range(3):
            assert await asyncio.wait_for(read_job(cluster), 5.0) == ("train-abc", 1)
        await until(lambda: plugin.runs == 2)
    finally:
        await asyncio.wait_for(cluster.close(), 5.0)
    assert hung_plugins(plugin) == []  # closing the client ended the plugin run it was waiting for


async def test_a_plugin_failing_once_in_the_periodic_rebuild_fails_no_request(
    apiserver: Any, job: None, plugin: Plugin, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = ClusterClient(exec_connection(apiserver, plugin), max_age=0.0)
    try:
        assert await read_job(cluster) == ("train-abc", 1)
        plugin.next_run("fail-once")

        assert await read_job(cluster) == ("train-abc", 1)
        await until(lambda: "Rate exceeded" in caplog.text)  # the plugin's own words are logged
        assert await read_job(cluster) == ("train-abc", 1)  # the failed rebuild left the client in use
    finally:
        await cluster.close()


async def test_after_a_failed_rebuild_the_next_try_waits_and_then_renews(
    apiserver: Any, job: None, plugin: Plugin, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(1000.0)
    cluster = ClusterClient(exec_connection(apiserver, plugin), max_age=600.0, clock=clock)
    try:
        assert await read_job(cluster) == ("train-abc", 1)
        plugin.next_run("fail-once")
        clock.now += 600.0
        assert await read_job(cluster) == ("train-abc", 1)  # starts the rebuild, which fails
        await until(lambda: "used 30s longer" in caplog.text)

        clock.now += cluster_client.BUILD_RETRY_SECONDS - 1
        await read_job(cluster)
        assert plugin.runs == 2  # not retried before its time
        clock.now += 1
        await read_job(cluster)  # due again: this one starts the rebuild, which works
        await until(lambda: cluster.generation == 2)
        assert await read_job(cluster) == ("train-abc", 2)
    finally:
        await cluster.close()


async def test_without_a_working_client_a_hung_plugin_is_a_transient_error_in_time(
    apiserver: Any, job: None, plugin: Plugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_client, "BUILD_TIMEOUT_SECONDS", 2.0, raising=False)
    plugin.next_run("hang")
    cluster = ClusterClient(exec_connection(apiserver, plugin))
    try:
        with pytest.raises(ConnectionError, match="exec plugin") as refused:
            await asyncio.wait_for(read_job(cluster), 5.0)
        assert is_transient(refused.value)  # the wait retries within its api_failure_tolerance
        assert plugin.runs == 1  # the plugin ran, and hung,
        assert hung_plugins(plugin) == []  # and was killed, not left behind (one more at every retry)

        plugin.next_run("ok")
        assert await read_job(cluster) == ("train-abc", 1)  # the next request tries the plugin again
    finally:
        await cluster.close()


@pytest.mark.parametrize("given_up_by", ["its timeout", "closing the client"])
async def test_a_plugin_given_up_on_is_killed_alone_not_the_triggerers_other_children(
    apiserver: Any, job: None, plugin: Plugin, given_up_by: str
) -> None:
    """The build's plugin is killed by its own PID: a process another provider started in the same
    triggerer while the plugin hung (a cncf pod-exec, a dbt run) keeps running."""
    plugin.next_run("hang")
    cluster = ClusterClient(exec_connection(apiserver, plugin), build_timeout=3.0)
    request = asyncio.create_task(read_job(cluster))
    other = None
    try:
        await until(lambda: plugin.runs == 1)  # the plugin runs, and hangs
        other = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(60)")
        if given_up_by == "its timeout":
            with pytest.raises(ConnectionError, match="did not come within"):
                await asyncio.wait_for(request, 10.0)
        else:
            await asyncio.wait_for(cluster.close(), 10.0)
        assert hung_plugins(plugin) == []

        with pytest.raises(asyncio.TimeoutError):  # not killed: still running a second later
            await asyncio.wait_for(other.wait(), 1.0)
    finally:
        request.cancel()
        if other is not None and other.returncode is None:
            other.kill()
            await other.wait()
        await cluster.close()


async def test_a_plugin_that_fails_to_start_a_client_is_a_transient_error(
    apiserver: Any, job: None, plugin: Plugin
) -> None:
    plugin.next_run("fail-once")
    cluster = ClusterClient(exec_connection(apiserver, plugin))
    try:
        with pytest.raises(ConnectionError, match="Rate exceeded") as refused:
            await read_job(cluster)
        assert is_transient(refused.value)
    finally:
        await cluster.close()


async def test_a_waiting_trigger_outlives_a_plugin_failing_in_the_rebuild(
    apiserver: Any, plugin: Plugin, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 15: the exec plugin failing once during the periodic rebuild ended every waiting trigger."""
    caplog.set_level(logging.WARNING)
    # Every lease finds the client due for its periodic rebuild (in production: every 10 minutes).
    monkeypatch.setattr(
        watch_registry, "ClusterClient", lambda connection, **options: ClusterClient(connection, max_age=0.0, **options)
    )
    labels = {TASK_INSTANCE_LABEL: "t"}
    await apiserver.put(make_job("train-abc", "ml", uid="uid-1", status=running_status(), labels=labels))
    connection = exec_connection(apiserver, plugin)
    triggers = [
        TrainingJobTrigger(
            kind="PyTorchJob", name="train-abc", namespace="ml", uid="uid-1", poll_interval=0.05, connection=connection
        )
        for _ in range(3)
    ]
    waits = [asyncio.create_task(_first_event(trigger)) for trigger in triggers]
    await until(lambda: apiserver.open_watches >= 1)

    plugin.next_run("fail-once")
    await apiserver.drop_watches()  # the watch's next request leases the client again: a rebuild is due
    await until(lambda: plugin.runs >= 2 and plugin.state.read_text() == "ok")  # it ran and failed
    await apiserver.put(make_job("train-abc", "ml", uid="uid-1", status=succeeded_status(), labels=labels))

    events = await asyncio.wait_for(asyncio.gather(*waits), 10.0)
    assert [event["status"] for event in events] == ["success"] * 3


def hung_plugins(plugin: Plugin, grace: float = 5.0) -> list[int]:
    """The plugin's processes still alive ``grace`` seconds after the check starts: a SIGKILL is delivered
    asynchronously, and on a busy machine the killed process may still be scheduled a moment later."""
    import psutil

    def alive(child: psutil.Process) -> bool:
        try:
            return (
                child.is_running() and child.status() != psutil.STATUS_ZOMBIE and str(plugin.script) in child.cmdline()
            )
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + grace
    while (
        left := [child.pid for child in psutil.Process().children() if alive(child)]
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


async def _first_event(trigger: TrainingJobTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise AssertionError("no event")
