"""A stand-in kubelet for the integration tests: runs the command of pods annotated ``disttrain.test/execute``.

kwok's simulated pods run no code. For a pod annotated ``disttrain.test/execute: "true"`` the
``pod-complete`` kwok stage waits until this runner has run the pod's main container on the host and
annotated the outcome: ``disttrain.test/exit-code`` and ``disttrain.test/termination-message`` (what
the container wrote to its ``terminationMessagePath``), which the stage turns into the container's
terminated state as a kubelet would.

What stands in for what (said here so no test overstates what it proves):

* the image's ``python`` is this venv's interpreter (the provider is installed in it, as the
  decorators' image needs); the image itself is ignored;
* ``torchrun`` and ``mpirun``, when this machine lacks them, are the stand-ins in ``tests/standins``
  (local processes with the variables the real launchers set; no rendezvous, no ssh);
* the environment is the container's as the Kubeflow operators wrote it into the pod (plain values
  and ``fieldRef`` to the pod's name and namespace); ConfigMap volumes (the mpi-operator's hostfile)
  are copied to a temporary directory, and variables pointing into their mount paths point there;
* only pods the kwok stage would complete are run (not ``restartPolicy: Always``, owned by a batch
  Job or a Kubeflow v1 job), so MPIJob workers stay simulated ``sshd`` servers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from airflow_provider_disttrain.decorators.payload import TERMINATION_PATH_ENV
from tests.standins import path_with_standins

EXECUTE = "disttrain.test/execute"
EXIT_CODE = "disttrain.test/exit-code"
TERMINATION_MESSAGE = "disttrain.test/termination-message"
# Owners whose pods the kwok pod-complete stage completes (dev/cluster/kwok/pod-complete.yaml).
COMPLETED_OWNERS = {"Job", "PyTorchJob", "TFJob", "XGBoostJob", "PaddleJob", "JAXJob"}
REPO = Path(__file__).resolve().parents[2]


def runnable(pod: dict[str, Any]) -> bool:
    metadata, spec = pod["metadata"], pod["spec"]
    owners = {owner["kind"] for owner in metadata.get("ownerReferences") or []}
    return (
        (metadata.get("annotations") or {}).get(EXECUTE) == "true"
        and EXIT_CODE not in (metadata.get("annotations") or {})
        and (pod.get("status") or {}).get("phase") == "Running"
        and spec.get("restartPolicy") != "Always"
        and owners <= COMPLETED_OWNERS
        and not metadata.get("deletionTimestamp")
    )


class PodRunner:
    """Polls one namespace's pods and runs each runnable pod once, in its own thread."""

    def __init__(self, core_v1: Any, namespace: str, workdir: Path, timeout: float = 120) -> None:
        self.core = core_v1
        self.namespace = namespace
        self.workdir = workdir
        self.timeout = timeout
        self.started: set[str] = set()
        self.results: dict[str, tuple[int, str, str]] = {}  # pod name -> (exit code, message, output)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> PodRunner:
        watcher = threading.Thread(target=self._poll, name=f"pod-runner-{self.namespace}", daemon=True)
        watcher.start()
        self._threads.append(watcher)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                listed = self.core.list_namespaced_pod(self.namespace)
            except Exception:  # an API server restart: poll again
                self._stop.wait(1)
                continue
            pods = self.core.api_client.sanitize_for_serialization(listed)
            for pod in pods["items"]:
                name = pod["metadata"]["name"]
                if name not in self.started and runnable(pod):
                    self.started.add(name)
                    thread = threading.Thread(target=self._run, args=(pod,), name=f"pod-{name}", daemon=True)
                    thread.start()
                    self._threads.append(thread)
            self._stop.wait(0.3)

    def _run(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        container = pod["spec"]["containers"][0]
        sandbox = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workdir))
        termination = sandbox / "termination-log"
        env = self._environment(pod, container, sandbox)
        env[TERMINATION_PATH_ENV] = str(termination)
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        try:
            done = subprocess.run(
                argv, env=env, cwd=sandbox, capture_output=True, text=True, timeout=self.timeout, check=False
            )
            code, output = done.returncode, done.stdout + done.stderr
        except (OSError, subprocess.TimeoutExpired) as error:
            code, output = 127, f"pod runner: {error!r}"
        message = termination.read_text() if termination.exists() else ""
        (sandbox / "output.log").write_text(output)
        self.results[name] = (code, message, output)
        # run-seconds 0: the container has run already, the kwok stage need not wait any longer.
        annotations = {EXIT_CODE: str(code), "disttrain.test/run-seconds": "0"}
        if message:
            annotations[TERMINATION_MESSAGE] = message
        self.core.patch_namespaced_pod(name, self.namespace, {"metadata": {"annotations": annotations}})

    def _environment(self, pod: dict[str, Any], container: dict[str, Any], sandbox: Path) -> dict[str, str]:
        mounts = self._config_maps(pod, container, sandbox)
        fields = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": self.namespace}
        env = {
            "PATH": path_with_standins(os.environ, str(Path(sys.executable).parent)),
            "PYTHONPATH": str(REPO),
            "HOME": str(sandbox),
        }
        for entry in container.get("env") or []:
            value = entry.get("value")
            if value is None:
                value = fields.get(((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath"), "")
            for mount_path, local in mounts.items():
                if value.startswith(mount_path):
                    value = str(local) + value[len(mount_path) :]
            env[entry["name"]] = value
        return env

    def _config_maps(self, pod: dict[str, Any], container: dict[str, Any], sandbox: Path) -> dict[str, Path]:
        """ConfigMap volumes the container mounts, copied into the sandbox: {mount path: local dir}."""
        volumes = {volume["name"]: volume for volume in pod["spec"].get("volumes") or []}
        mounts: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            config_map = (volumes.get(mount["name"]) or {}).get("configMap")
            if not config_map:
                continue
            data = self.core.read_namespaced_config_map(config_map["name"], self.namespace).data or {}
            local = sandbox / mount["name"]
            local.mkdir()
            items = config_map.get("items") or [{"key": key, "path": key} for key in data]
            for item in items:
                (local / item["path"]).write_text(data.get(item["key"], ""))
            mounts[mount["mountPath"].rstrip("/")] = local
        return mounts

    def wait_for(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.results) < count and time.monotonic() < deadline:
            time.sleep(0.2)
