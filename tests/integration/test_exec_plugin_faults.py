"""A kubeconfig exec credential plugin that fails once or hangs during the periodic client rebuild.

The triggerer's client of a cluster is rebuilt every ``CLIENT_MAX_AGE_SECONDS`` (shortened here to 2 s),
which re-runs the plugin. The plugin is the real one of the credential-rotation test (TokenRequest
tokens for the provider's service account), wrapped by ``flaky_exec_plugin.py`` to fail once, as a
throttled STS call does, or to hang. Before issue 15 a single failure ended every waiting trigger with
an error, and a hang blocked every request of the cluster; now the job's success is still seen.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.integration.conftest import SA_NAMESPACE
from tests.integration.test_trigger_faults import (
    RUN_SECONDS,
    exec_plugin_kubeconfig,
    make_trigger,
    run_like_the_triggerer,
    submit_jobs,
)

FLAKY_PLUGIN = Path(__file__).with_name("flaky_exec_plugin.py")


def flaky_plugin_kubeconfig(service_account_kubeconfig: Path, tmp_path: Path, label: str) -> tuple[Path, Path]:
    """The service account's kubeconfig authenticating through the flaky plugin; (kubeconfig, mode file)."""
    mode_file = tmp_path / "plugin.mode"
    mode_file.write_text("ok")
    path = exec_plugin_kubeconfig(
        service_account_kubeconfig,
        tmp_path / "kubeconfig",
        tmp_path / "plugin-runs.jsonl",
        label,
        FLAKY_PLUGIN,
        PLUGIN_MODE_FILE=str(mode_file),
    )
    return path, mode_file


def runs(mode_file: Path) -> list[str]:
    runs_file = mode_file.with_suffix(".runs")
    return runs_file.read_text().split() if runs_file.exists() else []


@pytest.mark.parametrize("misbehaviour", ["fail-once", "hang"])
def test_a_plugin_misbehaving_in_the_periodic_rebuild_does_not_end_the_wait(
    namespace: str,
    admin_api: Any,
    service_account_kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: Any,
    misbehaviour: str,
) -> None:
    from kubernetes import client

    import airflow_provider_disttrain.hooks.cluster_client as cluster_client

    monkeypatch.setattr(cluster_client, "CLIENT_MAX_AGE_SECONDS", 2.0)
    monkeypatch.setattr(cluster_client, "BUILD_TIMEOUT_SECONDS", 5.0, raising=False)
    label = f"disttrain.test/exec-token={namespace}"
    kubeconfig, mode_file = flaky_plugin_kubeconfig(service_account_kubeconfig, tmp_path, label)
    connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
    uids = submit_jobs(admin_api, namespace, {"flaky": {RUN_SECONDS: "20"}})
    triggers = [make_trigger(namespace, "flaky", uids["flaky"], watch_timeout=2) for _ in range(3)]

    async def misbehave_mid_wait() -> list[dict[str, Any]]:
        waiting = [asyncio.create_task(run_like_the_triggerer(trigger)) for trigger in triggers]
        while not runs(mode_file):
            await asyncio.sleep(0.2)
        mode_file.write_text(misbehaviour)
        while misbehaviour not in runs(mode_file):  # the next periodic rebuild ran the misbehaving plugin
            assert not any(task.done() for task in waiting), [task.result() for task in waiting if task.done()]
            await asyncio.sleep(0.2)
        events = await asyncio.wait_for(asyncio.gather(*waiting), 90)
        return [event for event, _ in events]

    try:
        events = asyncio.run(misbehave_mid_wait())
    finally:
        mode_file.write_text("ok")
        client.CoreV1Api(admin_api).delete_collection_namespaced_secret(SA_NAMESPACE, label_selector=label)

    assert [event["status"] for event in events] == ["success"] * 3, [event["message"] for event in events]
    if misbehaviour == "hang":  # the plugin that did not answer was killed at the build's timeout
        assert not [p for p in psutil.Process().children() if str(FLAKY_PLUGIN) in p.cmdline()]
