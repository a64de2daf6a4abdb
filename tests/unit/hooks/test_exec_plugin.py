"""``hooks.exec_plugin``: only the provider's own client builds run the exec plugin as ``OwnedExecProvider``;
every other load of a kubeconfig in the process (another provider's trigger) gets the library's."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.exec_provider import ExecProvider

from airflow_provider_disttrain.hooks.exec_plugin import OwnedExecProvider, owned_exec_plugins


def exec_config(*args: str) -> Any:
    return kube_config.ConfigNode(
        "exec", {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable, "args": list(args)}
    )


async def test_only_the_builds_task_and_its_children_get_the_owned_provider() -> None:
    async def provider_in_another_task() -> Any:
        return kube_config.ExecProvider(exec_config())

    with owned_exec_plugins(5.0):
        mine = kube_config.ExecProvider(exec_config())
        started_by_mine = await asyncio.create_task(provider_in_another_task())
    other = kube_config.ExecProvider(exec_config())

    assert isinstance(mine, OwnedExecProvider) and mine.timeout == 5.0
    assert isinstance(started_by_mine, OwnedExecProvider)
    assert type(other) is ExecProvider


async def test_the_owned_provider_answers_as_the_librarys_does() -> None:
    script = (
        "import json; print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', "
        "'kind': 'ExecCredential', 'status': {'token': 't'}}))"
    )
    assert await OwnedExecProvider(exec_config("-c", script), 10.0).run() == {"token": "t"}
    with pytest.raises(ConfigException, match=r"exec: process returned 3\. denied"):
        await OwnedExecProvider(exec_config("-c", "import sys; sys.stderr.write('denied'); sys.exit(3)"), 10.0).run()


async def test_a_plugin_past_its_timeout_is_killed_and_times_out() -> None:
    provider = OwnedExecProvider(exec_config("-c", "import time; time.sleep(60)"), 0.5)

    with pytest.raises(TimeoutError, match="did not answer within"):
        await provider.run()

    import psutil  # type: ignore[import-untyped]

    assert provider.pid is not None and not psutil.pid_exists(provider.pid)
