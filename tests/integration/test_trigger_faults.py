"""The trigger under real API-server behaviour (issue 7, "Faults, on the real local cluster").

Each test runs ``TrainingJobTrigger.run()`` the way the triggerer does: built as the operator's
``_defer`` builds it, every trigger in one asyncio loop, iterated to its end. What the tests assert
is seen from outside the trigger: the events, the API server's own count of the provider's requests
(``provider_requests``), the log, this process's TCP connections and the loop's tasks.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from airflow_provider_disttrain.triggers.training_job import SETTLE_SECONDS
from airflow_provider_disttrain.utils import telemetry
from tests.integration.conftest import ADMIN_KUBECONFIG, SA_NAME, SA_NAMESPACE, cluster_script
from tests.integration.provider_requests import ProviderRequests

# One test here restarts the API server that every test uses: it is marked `serial` (run alone, after
# the parallel pass: Makefile integration-test). The others use their own namespace, their own token
# Secret and this process's own connections and census, and run beside any test.

KIND = "PyTorchJob"
RUN_SECONDS = "disttrain.test/run-seconds"  # how long kwok keeps the job's pods Running
EXIT_CODE = "disttrain.test/exit-code"
PLUGIN = Path(__file__).with_name("exec_token_plugin.py")


# -- jobs and triggers ---------------------------------------------------------------------------------


def submit_jobs(
    admin_api: Any, namespace: str, annotations: dict[str, dict[str, str]], **params: Any
) -> dict[str, str]:
    """Create one master-only PyTorchJob per name, built and labelled as the operator does; name -> uid."""
    from kubernetes import client

    from airflow_provider_disttrain.job.kinds import get_job_kind
    from airflow_provider_disttrain.manifest.builder import JobParameters, build_manifest, set_identity
    from airflow_provider_disttrain.ownership.naming import task_instance_labels

    kind = get_job_kind(KIND)
    custom = client.CustomObjectsApi(admin_api)
    uids = {}
    for name, pod_annotations in annotations.items():
        parameters = JobParameters(image="busybox:1.36", restart_policy="Never", annotations=pod_annotations, **params)
        labels = task_instance_labels("trigger_faults", name, "manual__faults", -1, 1)
        manifest = set_identity(build_manifest(kind, None, parameters), name, namespace, labels)
        # Master only: the training-operator's webhook refuses a Worker spec of 0 replicas.
        del manifest["spec"][kind.replica_specs_key][kind.worker_replica]
        created = custom.create_namespaced_custom_object(**kind.resource.namespaced_path(namespace), body=manifest)
        uids[name] = created["metadata"]["uid"]
    return uids


def make_trigger(namespace: str, name: str, uid: str, **options: Any) -> Any:
    """The trigger ``TrainingJobOperator._defer`` builds, reaching the cluster through ``kubernetes_default``."""
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    connection = TrainingJobHook().trigger_connection()
    return TrainingJobTrigger(kind=KIND, name=name, namespace=namespace, uid=uid, connection=connection, **options)


async def run_like_the_triggerer(trigger: Any) -> tuple[dict[str, Any], float]:
    """Iterate ``run()`` to its end as the triggerer does; the one event and when it came (epoch)."""
    try:
        events = [event async for event in trigger.run()]
    finally:
        await trigger.cleanup()
    assert len(events) == 1, events
    return events[0].payload, time.time()


async def in_thread(wait: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking admin call (``jobs.wait_for``, a fault script) without stalling the triggers."""
    return await asyncio.to_thread(wait, *args)


def triggers_waiting() -> int:
    """How many triggers of this process have seen their job and wait for it (they run in this process)."""
    return len(telemetry.census)


async def until(what: str, probe: Callable[[], Any], timeout: float = 60) -> None:
    """Poll ``probe`` (on the loop: it must not block) until it is true, for at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.2)


def running_pods(jobs: Any, namespace: str) -> int:
    return sum(pod.status.phase == "Running" for pod in jobs.core.list_namespaced_pod(namespace).items)


def warnings_logged(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> list[str]:
    """Warnings and errors, from stdlib loggers (caplog) and from the trigger's structlog logger (stdout)."""
    captured = capfd.readouterr()
    printed = [
        line
        for line in (captured.out + captured.err).splitlines()
        if re.search(r"\[(warning|error|critical)\s*\]", line)
    ]
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] + printed


def api_server_port(kubeconfig: Path) -> int:
    port = urlparse(yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]).port
    assert port is not None
    return port


# -- 1. a quiet job ------------------------------------------------------------------------------------

QUIET_WATCH_TIMEOUT = 3


def test_a_job_quiet_for_longer_than_watch_timeout_costs_one_request_per_renewal(namespace, admin_api, caplog, capfd):
    caplog.set_level(logging.WARNING)
    uids = submit_jobs(admin_api, namespace, {"quiet": {RUN_SECONDS: "20"}})
    trigger = make_trigger(namespace, "quiet", uids["quiet"], watch_timeout=QUIET_WATCH_TIMEOUT)

    with ProviderRequests(admin_api, namespace) as requests:
        before = requests.totals()
        started = time.monotonic()
        event, _ = asyncio.run(run_like_the_triggerer(trigger))
        waited = time.monotonic() - started
        made = requests.since(before)
    warnings = warnings_logged(caplog, capfd)
    print(f"quiet job: {made} requests in {waited:.1f}s with watch_timeout={QUIET_WATCH_TIMEOUT}")

    assert event["status"] == "success", event["message"]
    renewals = math.ceil(waited / QUIET_WATCH_TIMEOUT)
    assert renewals >= 5, f"the job only ran {waited:.1f}s: too short to outlive several watch requests"
    # Watching all along (no fallback to polling): one watch per renewal, reads only to start.
    assert made["watch"] >= renewals - 1, (made, f"{waited:.1f}s")
    assert made["get"] + made["list"] <= 2, (made, f"{waited:.1f}s")
    assert sum(made.values()) <= renewals + 2, (made, f"{waited:.1f}s")
    assert not warnings, warnings


# -- 2. the API server restarts ------------------------------------------------------------------------

REQUESTS_PER_WATCH_AFTER_RESTART = 20  # a relist and rewatch with backoff; a hot loop makes hundreds


@pytest.mark.serial
def test_twenty_triggers_get_their_events_across_an_api_server_restart_without_a_hot_loop(namespace, admin_api, jobs):
    expected = {f"succeeds-{i}": "success" for i in range(18)} | {f"fails-{i}": "failed" for i in range(2)}
    annotations = {
        name: {RUN_SECONDS: "45", **({EXIT_CODE: "1"} if outcome == "failed" else {})}
        for name, outcome in expected.items()
    }
    uids = submit_jobs(admin_api, namespace, annotations)
    triggers = {name: make_trigger(namespace, name, uid) for name, uid in uids.items()}
    waiting_before = triggers_waiting()

    async def wait_across_a_restart() -> tuple[dict[str, tuple[dict[str, Any], float]], float]:
        waiting = {name: asyncio.create_task(run_like_the_triggerer(t)) for name, t in triggers.items()}
        # The jobs run and the triggers hold their resourceVersions: now the server goes away. (Not "once all
        # pods run": on a busy machine the last pod was seen Running only as the first jobs were ending.)
        await in_thread(jobs.wait_for, lambda: running_pods(jobs, namespace) > 0, 60, "a pod running")
        await until("every trigger to see its job", lambda: triggers_waiting() >= waiting_before + len(triggers))
        restart_began = time.time()
        await in_thread(cluster_script, "restart.sh", "kube-apiserver")
        events = await asyncio.wait_for(asyncio.gather(*waiting.values()), 180)
        return dict(zip(waiting, events, strict=True)), restart_began

    with ProviderRequests(admin_api, namespace) as requests:
        events, restart_began = asyncio.run(wait_across_a_restart())
        # Read once, at the end: the counters restarted with the server, so this is "since the restart".
        since_restart = requests.totals()
        seconds_since_restart = time.time() - restart_began
    print(f"API-server restart: {since_restart} requests in the {seconds_since_restart:.0f}s since it began")

    wrong = {name: event["message"] for name, (event, _) in events.items() if event["status"] != expected[name]}
    assert not wrong, wrong
    early = [name for name, (_, fired_at) in events.items() if fired_at < restart_began]
    assert not early, f"{early} finished before the restart: the test did not test it"
    shared_watches = 1  # one kind in one namespace, on one cluster
    assert sum(since_restart.values()) <= REQUESTS_PER_WATCH_AFTER_RESTART * shared_watches, (
        f"{since_restart} requests in the {seconds_since_restart:.0f}s since the restart"
    )


# -- 3. credentials revoked mid-wait -------------------------------------------------------------------


def exec_plugin_kubeconfig(
    service_account_kubeconfig: Path,
    path: Path,
    plugin_log: Path,
    label: str,
    plugin: Path = PLUGIN,
    **more_settings: str,
) -> Path:
    """The service account's kubeconfig, its static token replaced by ``exec_token_plugin.py`` (or
    ``plugin``, a wrapper of it, given ``more_settings`` as its environment too)."""
    kubeconfig = yaml.safe_load(service_account_kubeconfig.read_text())
    settings = {
        "PLUGIN_ADMIN_KUBECONFIG": str(ADMIN_KUBECONFIG),
        "PLUGIN_NAMESPACE": SA_NAMESPACE,
        "PLUGIN_SERVICE_ACCOUNT": SA_NAME,
        "PLUGIN_LABEL": label,
        "PLUGIN_LOG": str(plugin_log),
        **more_settings,
    }
    kubeconfig["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "env": [{"name": key, "value": value} for key, value in settings.items()],
            "interactiveMode": "Never",
        }
    }
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


def status_for_token(service_account_kubeconfig: Path, token: str, namespace: str) -> int | None:
    """The status the API server answers a read with ``token`` (None if it is accepted)."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    kubeconfig = yaml.safe_load(service_account_kubeconfig.read_text())
    kubeconfig["users"][0]["user"] = {"token": token}
    api = config.new_client_from_config_dict(kubeconfig)
    try:
        client.CustomObjectsApi(api).list_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs")
        return None
    except ApiException as error:
        return error.status
    finally:
        api.close()


def test_a_trigger_whose_credentials_are_revoked_mid_wait_renews_them_and_succeeds(
    namespace, admin_api, service_account_kubeconfig, tmp_path, monkeypatch
):
    from kubernetes import client

    plugin_log = tmp_path / "plugin-runs.jsonl"
    label = f"disttrain.test/exec-token={namespace}"
    kubeconfig = exec_plugin_kubeconfig(service_account_kubeconfig, tmp_path / "kubeconfig", plugin_log, label)
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
    uids = submit_jobs(admin_api, namespace, {"rotated": {RUN_SECONDS: "30"}})
    # Short watch requests, so the trigger asks the API server again soon after the revocation.
    trigger = make_trigger(namespace, "rotated", uids["rotated"], watch_timeout=3)
    core = client.CoreV1Api(admin_api)
    waiting_before = triggers_waiting()

    def plugin_runs() -> list[dict[str, Any]]:
        return [json.loads(line) for line in plugin_log.read_text().splitlines()] if plugin_log.exists() else []

    async def revoke_mid_wait() -> tuple[dict[str, Any], float]:
        waiting = asyncio.create_task(run_like_the_triggerer(trigger))
        while not plugin_runs():
            assert not waiting.done(), waiting.result()
            await asyncio.sleep(0.2)
        await until("the trigger to see its job with the first token", lambda: triggers_waiting() > waiting_before)
        assert not waiting.done(), waiting.result()
        await in_thread(core.delete_namespaced_secret, plugin_runs()[0]["secret"], SA_NAMESPACE)
        revoked_at = time.time()
        event, fired_at = await asyncio.wait_for(waiting, 120)
        assert fired_at > revoked_at
        print(f"credentials: revoked, then the event came {fired_at - revoked_at:.1f}s later")
        return event, revoked_at

    try:
        event, revoked_at = asyncio.run(revoke_mid_wait())
        first_token_answer = status_for_token(service_account_kubeconfig, plugin_runs()[0]["token"], namespace)
    finally:
        core.delete_collection_namespaced_secret(SA_NAMESPACE, label_selector=label)

    assert first_token_answer == 401, "deleting the Secret did not revoke the token it was bound to"
    assert event["status"] == "success", event["message"]
    renewed = [run["time"] - revoked_at for run in plugin_runs() if run["time"] > revoked_at]
    print(f"credentials: the exec plugin ran again {', '.join(f'{s:.1f}s' for s in renewed)} after the revocation")
    assert renewed, "the trigger never ran the exec plugin again after the revocation"


# -- 4. fifty triggers, twenty moved away midway ---------------------------------------------------------


def held_connections(port: int) -> set[tuple[str, int]]:
    """Local addresses of this process's TCP sockets to the API server."""
    import psutil

    sockets = psutil.Process().net_connections(kind="tcp")
    return {tuple(s.laddr) for s in sockets if s.raddr and s.raddr.port == port}


def close_admin_connections(admin_api: Any) -> None:
    """The test's own admin client talks to the API server too: close its keep-alive connections."""
    admin_api.rest_client.pool_manager.clear()
    admin_api.last_response = None  # the client keeps its last response, and with it the socket, open


def open_aiohttp_sessions() -> list[Any]:
    import aiohttp

    gc.collect()  # an unreferenced unclosed session reports itself to the loop's exception handler here
    # type(), not isinstance(): isinstance() reads __class__, which some lazy proxies in the heap turn
    # into an import (Airflow's cloudpickle loader fails on a machine without cloudpickle).
    return [obj for obj in gc.get_objects() if issubclass(type(obj), aiohttp.ClientSession) and not obj.closed]


async def until_quiet(port: int, baseline: set[tuple[str, int]], linger: float) -> tuple[list[str], set[Any]]:
    """Wait up to ``linger`` s for every other task to end and every API-server connection to close."""
    deadline = time.monotonic() + linger
    while True:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        connections = held_connections(port) - baseline
        if (not tasks and not connections) or time.monotonic() > deadline:
            return [f"{t.get_name()}: {t.get_coro()}" for t in tasks], connections
        await asyncio.sleep(0.5)


def test_fifty_triggers_some_moved_away_midway_leave_no_task_session_or_connection(
    namespace, admin_api, service_account_kubeconfig
):
    names = [f"job-{i:02d}" for i in range(50)]
    moved = names[:40:2]  # 20 triggers the triggerer cancels to hand them to another triggerer
    uids = submit_jobs(admin_api, namespace, {name: {RUN_SECONDS: "12"} for name in names})
    port = api_server_port(service_account_kubeconfig)

    async def fifty_triggers() -> dict[str, Any]:
        loop_errors: list[str] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, context: loop_errors.append(context["message"]))
        close_admin_connections(admin_api)
        baseline = held_connections(port)
        triggers = {name: make_trigger(namespace, name, uids[name]) for name in names}
        waiting_before = triggers_waiting()
        waiting = {name: asyncio.create_task(run_like_the_triggerer(triggers[name])) for name in names}
        # Midway: every trigger has seen its job and waits for it (the jobs run 12 s).
        await until("every trigger to see its job", lambda: triggers_waiting() >= waiting_before + len(names))
        assert not any(task.done() for task in waiting.values()), "a job ended before the triggers were moved"

        for name in moved:
            waiting[name].cancel()
        cancelled = await asyncio.gather(*(waiting[name] for name in moved), return_exceptions=True)
        assert all(isinstance(result, asyncio.CancelledError) for result in cancelled), cancelled
        # The other triggerer rebuilds them from what the triggers table stores.
        for name in moved:
            classpath, kwargs = triggers[name].serialize()
            assert classpath.endswith(".TrainingJobTrigger")
            waiting[name] = asyncio.create_task(run_like_the_triggerer(type(triggers[name])(**kwargs)))

        events = await asyncio.wait_for(asyncio.gather(*waiting.values()), 120)
        close_admin_connections(admin_api)
        tasks, connections = await until_quiet(port, baseline, linger=10)
        return {
            "events": {name: event for name, (event, _) in zip(waiting, events, strict=True)},
            "tasks": tasks,
            "connections": connections,
            "sessions": open_aiohttp_sessions(),
            "loop_errors": loop_errors,
        }

    left = asyncio.run(fifty_triggers())

    not_success = {name: event["message"] for name, event in left["events"].items() if event["status"] != "success"}
    assert not not_success, not_success
    assert not left["tasks"], left["tasks"]
    assert not left["sessions"], left["sessions"]
    assert not left["connections"], f"still connected to the API server from {left['connections']}"
    assert not left["loop_errors"], left["loop_errors"]


# -- the semantics the shared watch keeps ----------------------------------------------------------------


def test_a_job_deleted_mid_wait_by_someone_else_ends_the_wait_with_an_error_naming_the_deletion(
    namespace, admin_api, jobs
):
    uids = submit_jobs(admin_api, namespace, {"doomed": {RUN_SECONDS: "600"}})
    trigger = make_trigger(namespace, "doomed", uids["doomed"])
    waiting_before = triggers_waiting()

    async def delete_mid_wait(requests: ProviderRequests) -> tuple[dict[str, Any], dict[str, int]]:
        waiting = asyncio.create_task(run_like_the_triggerer(trigger))
        await in_thread(jobs.wait_for, lambda: running_pods(jobs, namespace) == 1, 60, "the job's pod running")
        await until("the trigger to see its job", lambda: triggers_waiting() > waiting_before)
        assert not waiting.done(), waiting.result()
        before = await in_thread(requests.totals)
        delete = jobs.custom.delete_namespaced_custom_object
        await in_thread(delete, "kubeflow.org", "v1", namespace, "pytorchjobs", "doomed")
        deleted_at = time.time()
        event, fired_at = await asyncio.wait_for(waiting, 60)
        # The event comes no sooner than the trigger's settle time (its own story, told in
        # tests/unit/triggers/test_training_job_settle.py): a figure for the reader, not a bound.
        print(f"deletion: reported {fired_at - deleted_at:.1f}s after it happened")
        return event, await in_thread(requests.since, before)

    with ProviderRequests(admin_api, namespace) as requests:
        event, made = asyncio.run(delete_mid_wait(requests))

    assert event["status"] == "error", event["message"]
    assert f"{KIND} {namespace}/doomed" in event["message"]
    assert "deleted" in event["message"]
    # The open watch told it (the default watch_timeout, 300 s, is far off): no new watch, no list, no
    # poll was needed to learn of the deletion.
    assert made["watch"] == 0 and made["list"] == 0, made
    assert made["get"] <= 1, made  # at most one read to confirm what the watch said


def test_each_startup_deadline_fires_on_time_although_nothing_changes_on_the_server(namespace, admin_api):
    uids = submit_jobs(admin_api, namespace, {"no-gpus-a": {}, "no-gpus-b": {}}, gpus_per_replica=64)
    # Nothing will ever happen to these jobs (64 GPUs never schedule: a node has 8): only the deadlines end the waits.
    # Both after the trigger's settle time (no event comes sooner), 4 s apart.
    settled = time.time() + SETTLE_SECONDS
    deadlines = {"no-gpus-a": settled + 2, "no-gpus-b": settled + 6}
    triggers = [make_trigger(namespace, name, uids[name], startup_deadline=deadlines[name]) for name in uids]

    async def wait_for_both() -> list[tuple[dict[str, Any], float]]:
        return await asyncio.gather(*(run_like_the_triggerer(trigger) for trigger in triggers))

    with ProviderRequests(admin_api, namespace) as requests:
        before = requests.totals()
        fired = asyncio.run(wait_for_both())
        made = requests.since(before)

    for event, fired_at in fired:
        assert event["status"] == "timeout", event["message"]
        assert "did not start within startup_timeout" in event["message"]
        late = fired_at - deadlines[event["name"]]
        print(f"{event['name']} fired {late:+.1f}s from its deadline")
        assert late >= 0, f"{event['name']} fired {-late:.1f}s before its deadline"
    # Woken by its own timer, not by the server: one watch for both (a renewal comes only after the
    # default watch_timeout, 300 s), a list to start it, and at most one read per job to confirm its
    # state before the timeout was judged. A trigger that judged deadlines only on a server event would
    # still be waiting for the renewal.
    assert made["watch"] == 1, made
    assert made["list"] <= 1 and made["get"] <= len(uids), made
