"""The kubeconfig's exec credential plugin, run as this provider's own child with its own timeout.

kubernetes_asyncio's ``ExecProvider`` starts the plugin (aws, gcloud, kubelogin) and keeps the process
to itself: a build of the provider's client that timed out could only kill every child process the
triggerer had started meanwhile, other providers' included. Within ``owned_exec_plugins()`` (set by the
task that builds the provider's client, and inherited only by the tasks it starts), the plugin is run
by ``OwnedExecProvider`` instead: it keeps the process, and on its timeout or on cancellation kills that
process's own session (the plugin and whatever it started), nothing else. Everyone else's loads of a
kubeconfig in the same process (the cncf triggers) get the library's provider unchanged.

The library has no hook for this: ``KubeConfigLoader`` calls the module's ``ExecProvider`` name, and
``ExecProvider.run`` starts and reads the process in one method. So that name is replaced once by a
factory that picks per task, and ``run`` is rewritten here with the library's checks of the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.exec_provider import ExecProvider

from airflow_provider_disttrain.utils.timeouts import within

_REAP_SECONDS = 5.0
_timeout: contextvars.ContextVar[float | None] = contextvars.ContextVar("disttrain_exec_plugin_timeout", default=None)
_library_provider = kube_config.ExecProvider


class OwnedExecProvider(ExecProvider):
    """``ExecProvider`` whose run is bounded by ``timeout`` and kills only its own process when it ends early.

    ``pid``: the plugin's process id while (and after) it runs; None before.
    """

    def __init__(self, exec_config: Any, timeout: float) -> None:
        super().__init__(exec_config)
        self.timeout = timeout
        self.pid: int | None = None

    async def run(self, previous_response: str | None = None) -> Any:
        exec_info: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": sys.stdout.isatty()},
        }
        if previous_response:
            exec_info["spec"]["response"] = previous_response
        env = {**self.env, "KUBERNETES_EXEC_INFO": json.dumps(exec_info)}
        # Its own session: the plugin and what it starts form one process group that can be killed
        # alone (the plugin reads no terminal here: the triggerer has none).
        process = await asyncio.create_subprocess_exec(
            *self.args,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self.pid = process.pid
        try:
            async with within(self.timeout):
                stdout, stderr = await process.communicate()
        except (TimeoutError, asyncio.TimeoutError):
            await _kill(process)
            raise TimeoutError(f"exec: the plugin did not answer within {self.timeout:.0f}s") from None
        except asyncio.CancelledError:  # the build was given up (its own bound, or the client closed)
            await _kill(process)
            raise
        return self._status(process.returncode, stdout, stderr)

    def _status(self, exit_code: int | None, stdout: bytes, stderr: bytes) -> Any:
        """The credential's status, checked as the library's ``ExecProvider.run`` checks it (same errors)."""
        if exit_code != 0:
            message = f"exec: process returned {exit_code}"
            if stderr.strip():
                message += f". {stderr.strip().decode(errors='replace')}"
            raise ConfigException(message)
        try:
            data = json.loads(stdout)
        except ValueError as error:
            raise ConfigException(f"exec: failed to decode process output: {error}") from error
        for key in ("apiVersion", "kind", "status"):
            if key not in data:
                raise ConfigException(f"exec: malformed response. missing key '{key}'")
        if data["apiVersion"] != self.api_version:
            raise ConfigException(f"exec: plugin api version {data['apiVersion']} does not match {self.api_version}")
        return data["status"]


async def _kill(process: asyncio.subprocess.Process) -> None:
    """SIGKILL the plugin's session (its process group: the plugin's pid), then reap the plugin."""
    if process.returncode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
        async with within(_REAP_SECONDS):
            await asyncio.shield(process.wait())


def _provider(exec_config: Any, *args: Any, **kwargs: Any) -> ExecProvider:
    """What ``KubeConfigLoader`` gets for ``ExecProvider(...)``: ours inside ``owned_exec_plugins``."""
    timeout = _timeout.get()
    if timeout is None:
        return _library_provider(exec_config, *args, **kwargs)
    return OwnedExecProvider(exec_config, timeout)


@contextlib.contextmanager
def owned_exec_plugins(timeout: float) -> Iterator[None]:
    """Within it (this task and the tasks it starts), exec plugins run as ``OwnedExecProvider(timeout)``."""
    kube_config.ExecProvider = _provider  # type: ignore[misc,assignment]  # once; the same for everyone after
    token = _timeout.set(timeout)
    try:
        yield
    finally:
        _timeout.reset(token)
