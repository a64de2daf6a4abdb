"""One pod on the executing node, from bound to deleted: what the kubelet's pod worker does, for processes.

The worker creates the pod's sandbox (network namespace, address, /etc files, volumes), runs the init
containers one after another, then the main containers, restarts them as ``restartPolicy`` says (with
a back-off), reports every change of state in the pod's status, and when the pod is deleted stops the
containers (SIGTERM, the grace period, SIGKILL), removes the sandbox and deletes the pod object.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import network
from .environment import EnvironmentError_, command_line, container_environment, decoded_secret
from .hosts import hosts_file, resolv_conf
from .kube import MERGE_PATCH, ApiClient, ApiError
from .network import AddressPool, NetworkConfig
from .process import ContainerProcess, Launch, start, timestamp
from .volumes import NodeMounts, PodVolumes, VolumeNotReady, prepare_volumes, set_volume_ownership

log = logging.getLogger("noderunner.pod")
TERMINAL = ("Succeeded", "Failed")
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
MAX_MESSAGE = 4096
FALLBACK_LINES, FALLBACK_BYTES = 80, 2048
MAX_GRACE_SECONDS = 30


@dataclass
class NodeContext:
    """What every pod worker shares: the API, the node, the network, the image stand-in."""

    api: ApiClient
    node_name: str
    node_ip: str
    capacity: dict[str, str]
    network: NetworkConfig
    addresses: AddressPool
    state_dir: Path
    image_env: dict[str, str]  # what the (absent) image would set, e.g. PATH
    image_mounts: list[dict[str, Any]]  # the image's files: host directories bound into every container
    backoff_seconds: float
    max_backoff_seconds: float
    hosts_changed: Callable[[], None]
    mounts: NodeMounts = field(default_factory=NodeMounts)  # which pods have each local volume mounted


@dataclass
class Container:
    spec: dict[str, Any]
    init: bool
    restart_count: int = 0
    run: ContainerProcess | None = None
    state: dict[str, Any] = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: dict[str, Any] = field(default_factory=dict)
    next_start: float | None = None
    backoff: float = 0.0
    config_error: bool = False  # the last start failed before a process existed (no restart counted)
    log_files: list[Path] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "containerID": f"noderunner://{self.run.pid}" if self.run else "",
            "ready": running and not self.init,
            "started": running,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }


class PodWorker(threading.Thread):
    def __init__(self, context: NodeContext, pod: dict[str, Any]) -> None:
        super().__init__(name=f"pod-{pod['metadata']['namespace']}/{pod['metadata']['name']}", daemon=True)
        self.context = context
        self.pod = pod
        self.uid: str = pod["metadata"]["uid"]
        self.namespace: str = pod["metadata"]["namespace"]
        self.pod_name: str = pod["metadata"]["name"]
        self.netns = network.NETNS_PREFIX + self.uid.replace("-", "")[:12]
        self.pod_dir = context.state_dir / "pods" / self.uid
        self.address: str | None = None
        self.phase = "Pending"
        self.reported: dict[str, Any] | None = None
        self.init_containers = [Container(spec, True) for spec in pod["spec"].get("initContainers") or []]
        self.containers = [Container(spec, False) for spec in pod["spec"]["containers"]]
        self.initialized = not self.init_containers
        self.vanished = threading.Event()
        self.changed = threading.Event()
        self.volumes: dict[str, str] = {}
        self.pod_volumes = PodVolumes()
        self.hostname = pod["spec"].get("hostname") or self.pod_name[:63]
        self.pod_reason: str | None = None
        self.pod_message: str | None = None

    # ---------------------------------------------------------------- called by the node's sync loop
    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        self.changed.set()

    def vanish(self) -> None:
        self.vanished.set()
        self.changed.set()

    @property
    def deleting(self) -> bool:
        return self.vanished.is_set() or bool(self.pod["metadata"].get("deletionTimestamp"))

    def container(self, name: str) -> Container | None:
        return next((c for c in [*self.init_containers, *self.containers] if c.name == name), None)

    def write_hosts(self, pods: list[dict[str, Any]], services: list[dict[str, Any]]) -> None:
        if self.address is None:
            return
        hosts = self.pod_dir / "etc" / "hosts"
        content = hosts_file(self.pod, self.address, pods, services)
        if hosts.exists() and hosts.read_text() == content:
            return
        # In place (same inode): the containers see the file through a bind mount.
        with hosts.open("r+" if hosts.exists() else "w") as file:
            file.write(content)
            file.truncate()

    # ------------------------------------------------------------------------------------ lifecycle
    def run(self) -> None:
        try:
            if (self.pod.get("status") or {}).get("phase") in TERMINAL:
                self.phase = self.pod["status"]["phase"]  # finished before this runner started
            else:
                self._run_pod()
            self._wait_for_deletion()
        except Exception as error:
            log.error("pod %s/%s: %s", self.namespace, self.pod_name, traceback.format_exc())
            # Said in the pod's status rather than left Pending without a reason.
            self.pod_reason, self.pod_message = "NodeRunnerError", f"the executing node failed this pod: {error!r}"
            self._stop_all(grace=0)
            self.phase = "Failed"
            self._report()
            self._wait_for_deletion()
        finally:
            self._stop_all(grace=0)
            self._remove_sandbox()
            if self.deleting and not self.vanished.is_set():
                if self.phase not in TERMINAL:
                    # As the kubelet does before the final delete: a terminal phase lets the Job
                    # controller remove its finalizer (batch.kubernetes.io/job-tracking) from the pod.
                    ok = all(c.state.get("terminated", {}).get("exitCode") == 0 for c in self.containers)
                    self.phase = "Succeeded" if ok else "Failed"
                    self._report()
                self._delete_pod_object()
            shutil.rmtree(self.pod_dir, ignore_errors=True)

    def _run_pod(self) -> None:
        self._report()
        self._create_sandbox()
        while not self.deleting:
            try:
                self.pod_volumes = prepare_volumes(self._pod_with_address(), self.pod_dir, self._get, self._token)
                self.volumes = self.pod_volumes.paths
                break
            except VolumeNotReady as error:
                self._set_waiting_all("ContainerCreating", str(error))
                self._report()
                self.changed.wait(1)
                self.changed.clear()
        # Which local volumes this pod is the first on the node to mount (released with the sandbox).
        mounts = self.context.mounts
        first_mounts = {name: mounts.mount(self.volumes[name], self.uid) for name in self.pod_volumes.local}
        self._apply_fs_group(first_mounts)
        restart_policy = self.pod["spec"].get("restartPolicy", "Always")
        for container in self.init_containers:
            while not self.deleting:
                outcome = self._run_to_completion(container)
                if outcome == 0:
                    break
                if outcome is None:
                    return
                if restart_policy == "Never":
                    self._finish("Failed")
                    return
                self._back_off(container)
                self._report()
                self._sleep_until(container.next_start)
            if self.deleting:
                return
        self.initialized = True
        for container in self.containers:
            self._start(container)
        self._report()
        while not self.deleting:
            self._supervise(restart_policy)
            self._report()
            if self.phase in TERMINAL:
                return
            self.changed.wait(0.2)
            self.changed.clear()
        self._stop_all(grace=self._grace_seconds())
        self._report()

    def _supervise(self, restart_policy: str) -> None:
        now = time.monotonic()
        for container in self.containers:
            if container.run is not None and self._reap(container):
                code = container.state["terminated"]["exitCode"]
                if restart_policy == "Always" or (restart_policy == "OnFailure" and code != 0):
                    self._back_off(container)
            elif container.run is None and container.next_start is not None and now >= container.next_start:
                if not container.config_error:
                    container.restart_count += 1
                self._start(container)
        if all(c.run is None and c.next_start is None for c in self.containers):
            failed = any(c.state.get("terminated", {}).get("exitCode", 1) != 0 for c in self.containers)
            self._finish("Failed" if failed else "Succeeded")

    def _wait_for_deletion(self) -> None:
        while not self.deleting:
            self.changed.wait(5)
            self.changed.clear()
            self._report()  # again, if the last update failed

    def _finish(self, phase: str) -> None:
        self.phase = phase
        self._report()
        # A finished pod keeps no sandbox (the kubelet kills it too); its logs stay until it is deleted.
        self._remove_sandbox()

    # ----------------------------------------------------------------------------------- containers
    def _run_to_completion(self, container: Container) -> int | None:
        """The exit code of one run, or None if the pod was deleted meanwhile."""
        self._start(container)
        while container.run is None:  # CreateContainerConfigError: try again later
            self._report()
            self._sleep_until(container.next_start)
            if self.deleting:
                return None
            self._start(container)
        self._report()
        while container.run is not None and not self._reap(container):
            if self.deleting:
                self._stop_all(grace=self._grace_seconds())
                return None
            self.changed.wait(0.2)
            self.changed.clear()
        self._report()
        return int(container.state["terminated"]["exitCode"])

    def _start(self, container: Container) -> None:
        container.next_start = None
        run_dir = self.pod_dir / "runs" / f"{container.name}-{container.restart_count}"
        log_file = self.pod_dir / "logs" / container.name / f"{container.restart_count}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.touch()
        container.log_files.append(log_file)
        try:
            launch = self._launch(container, run_dir, log_file)
        except EnvironmentError_ as error:
            container.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}}
            container.next_start = time.monotonic() + self.context.max_backoff_seconds
            container.config_error = True
            return
        container.config_error = False
        container.run = start(launch)
        container.state = {"running": {"startedAt": container.run.started_at}}
        log.info("pod %s/%s: started %s (pid %d)", self.namespace, self.pod_name, container.name, container.run.pid)

    def _reap(self, container: Container) -> bool:
        """True (and the state terminated) once the container's process has exited."""
        assert container.run is not None
        run = container.run
        code = run.exit_code()
        if code is None:
            return False
        run.kill_all()  # what it left behind (the cgroup's other processes)
        start_error = run.start_error()
        if start_error:
            reason, message = "StartError", start_error
        elif run.oom_killed():
            reason, message = "OOMKilled", self._termination_message(container, run, code)
        else:
            reason, message = ("Completed" if code == 0 else "Error"), self._termination_message(container, run, code)
        terminated: dict[str, Any] = {
            "exitCode": code,
            "reason": reason,
            "startedAt": run.started_at,
            "finishedAt": run.finished_at or timestamp(),
            "containerID": f"noderunner://{run.pid}",
        }
        if message:
            terminated["message"] = message
        container.state = {"terminated": terminated}
        run.release()
        container.run = None
        log.info("pod %s/%s: %s exited %d (%s)", self.namespace, self.pod_name, container.name, code, reason)
        return True

    def _back_off(self, container: Container) -> None:
        """Restart later: the kubelet's CrashLoopBackOff, doubling from ``backoff_seconds`` (shorter here)."""
        container.last_state = container.state
        container.backoff = min(
            container.backoff * 2 if container.backoff else self.context.backoff_seconds,
            self.context.max_backoff_seconds,
        )
        container.next_start = time.monotonic() + container.backoff
        message = f"back-off {container.backoff:g}s restarting failed container={container.name} pod={self.pod_name}"
        container.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
        if container.init:
            container.restart_count += 1

    def _sleep_until(self, deadline: float | None) -> None:
        while deadline is not None and time.monotonic() < deadline and not self.deleting:
            self.changed.wait(min(0.2, deadline - time.monotonic()))
            self.changed.clear()

    def _stop_all(self, grace: float) -> None:
        """SIGTERM to every running container, SIGKILL (to all their processes) after ``grace`` seconds."""
        running = [c for c in [*self.init_containers, *self.containers] if c.run is not None]
        for container in running:
            assert container.run is not None
            container.run.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(c.run and c.run.exit_code() is None for c in running):
            time.sleep(0.1)
        for container in running:
            if container.run is not None:
                container.run.kill_all()
                self._reap(container)

    def _grace_seconds(self) -> float:
        if self.vanished.is_set():
            return 0
        grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        return float(min(int(grace), MAX_GRACE_SECONDS))

    def _termination_message(self, container: Container, run: ContainerProcess, code: int) -> str:
        path = run.launch.run_dir / "termination-log"
        message = path.read_bytes()[:MAX_MESSAGE].decode(errors="replace") if path.exists() else ""
        if not message and code != 0 and container.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            lines = [line.split(" ", 3)[-1] for line in run.launch.log_file.read_text().splitlines()]
            message = "\n".join(lines[-FALLBACK_LINES:])[-FALLBACK_BYTES:]
        return message

    # -------------------------------------------------------------------------------------- launch
    def _launch(self, container: Container, run_dir: Path, log_file: Path) -> Launch:
        spec = container.spec
        security = {**(self.pod["spec"].get("securityContext") or {}), **(spec.get("securityContext") or {})}
        uid, gid = security.get("runAsUser"), security.get("runAsGroup")
        if security.get("runAsNonRoot") and not uid:
            raise EnvironmentError_(
                "container has runAsNonRoot and image will run as root (give runAsUser: this node has no image users)"
            )
        pod_security = self.pod["spec"].get("securityContext") or {}
        groups = [
            *pod_security.get("supplementalGroups", []),
            *([pod_security["fsGroup"]] if "fsGroup" in pod_security else []),
        ]
        base = {
            **self.context.image_env,
            "HOSTNAME": self.hostname,
            "HOME": "/root" if not uid else "/tmp",
        }
        env = container_environment(self._pod_with_address(), spec, self._lookup, base, self.context.capacity)
        run_dir.mkdir(parents=True, exist_ok=True)
        termination = run_dir / "termination-log"
        termination.touch()
        os.chmod(termination, 0o666)
        etc = self.pod_dir / "etc"
        mounts: list[dict[str, Any]] = [
            *self.context.image_mounts,
            {"source": str(etc / "hosts"), "target": "/etc/hosts"},
            {"source": str(etc / "resolv.conf"), "target": "/etc/resolv.conf"},
            {"source": str(etc / "hostname"), "target": "/etc/hostname"},
            {"source": str(termination), "target": spec.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH},
        ]
        for mount in spec.get("volumeMounts") or []:
            if mount["name"] not in self.volumes:
                raise EnvironmentError_(f"volume mount {mount['name']!r}: no such volume")
            source = Path(self.volumes[mount["name"]])
            if mount.get("subPath"):
                source = source / mount["subPath"]
                if not source.exists():
                    source.mkdir(parents=True)
            mounts.append(
                {"source": str(source), "target": mount["mountPath"], "read_only": bool(mount.get("readOnly"))}
            )
        limits = (spec.get("resources") or {}).get("limits") or {}
        return Launch(
            netns=self.netns,
            hostname=self.hostname,
            argv=command_line(spec, env),
            env=env,
            mounts=mounts,
            workdir=spec.get("workingDir"),
            uid=uid,
            gid=gid if gid is not None else (0 if uid is None else uid),
            groups=groups if uid is not None else None,
            memory_limit=limits.get("memory"),
            run_dir=run_dir,
            log_file=log_file,
            no_new_privs=(spec.get("securityContext") or {}).get("allowPrivilegeEscalation") is False,
        )

    def _apply_fs_group(self, first_mounts: dict[str, bool]) -> None:
        """``fsGroup``: the volumes whose plugin manages ownership get that group, group-writable (the
        kubelet's SetVolumeOwnership); a local PersistentVolume only at its first mount on the node."""
        security = self.pod["spec"].get("securityContext") or {}
        group = security.get("fsGroup")
        if group is None:
            return
        for name, read_only in self.pod_volumes.managed.items():
            if first_mounts.get(name, True):
                set_volume_ownership(Path(self.volumes[name]), group, read_only, security.get("fsGroupChangePolicy"))

    # -------------------------------------------------------------------------------------- sandbox
    def _create_sandbox(self) -> None:
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        etc = self.pod_dir / "etc"
        etc.mkdir(exist_ok=True)
        (etc / "resolv.conf").write_text(resolv_conf(self.namespace))
        (etc / "hostname").write_text(self.hostname + "\n")
        (etc / "hosts").write_text("")
        self.address = self.context.addresses.take()
        network.create_pod_network(self.netns, self.address, self.context.network)
        self.context.hosts_changed()
        self._report()

    def _remove_sandbox(self) -> None:
        self.context.mounts.unmount_all(self.uid)  # a finished pod's volumes are unmounted
        if self.address is None:
            return
        network.delete_pod_network(self.netns)
        self.context.addresses.give_back(self.address)
        self.address = None
        self.context.hosts_changed()

    # ------------------------------------------------------------------------------------- the API
    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.context.api.get(path)  # type: ignore[no-any-return]
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def _lookup(self, kind: str, name: str) -> dict[str, str] | None:
        resource = "configmaps" if kind == "ConfigMap" else "secrets"
        found = self._get(f"/api/v1/namespaces/{self.namespace}/{resource}/{name}")
        if found is None:
            return None
        return decoded_secret(found) if kind == "Secret" else dict(found.get("data") or {})

    def _token(self, namespace: str, account: str, audience: str | None, seconds: int, pod: dict[str, Any]) -> str:
        spec: dict[str, Any] = {
            "expirationSeconds": max(seconds, 600),
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": self.pod_name, "uid": self.uid},
        }
        if audience:
            spec["audiences"] = [audience]
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token"
        response = self.context.api.request(
            "POST", path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        )
        return str(response["status"]["token"])

    def _pod_with_address(self) -> dict[str, Any]:
        pod = copy.deepcopy(self.pod)
        status = pod.setdefault("status", {})
        status["podIP"] = self.address or ""
        status["podIPs"] = [{"ip": self.address}] if self.address else []
        status["hostIP"] = self.context.node_ip
        status["hostIPs"] = [{"ip": self.context.node_ip}]
        return pod

    def _set_waiting_all(self, reason: str, message: str) -> None:
        for container in [*self.init_containers, *self.containers]:
            if container.run is None:
                container.state = {"waiting": {"reason": reason, "message": message}}

    def _status(self) -> dict[str, Any]:
        now = timestamp()
        existing = {c["type"]: c for c in (self.pod.get("status") or {}).get("conditions") or []}
        mains_ready = all("running" in c.state for c in self.containers) and self.phase == "Running"
        ours = {
            "PodReadyToStartContainers": self.address is not None or self.phase in TERMINAL,
            "Initialized": self.initialized,
            "ContainersReady": mains_ready,
            "Ready": mains_ready,
        }
        conditions = [c for kind, c in existing.items() if kind not in ours]
        for kind, value in ours.items():
            previous = existing.get(kind) or {}
            condition_status = "True" if value else "False"
            moved = previous.get("status") != condition_status
            conditions.append(
                {
                    "type": kind,
                    "status": condition_status,
                    "lastProbeTime": None,
                    "lastTransitionTime": now if moved else previous["lastTransitionTime"],
                }
            )
        status: dict[str, Any] = {
            "phase": self.phase,
            "conditions": conditions,
            "hostIP": self.context.node_ip,
            "hostIPs": [{"ip": self.context.node_ip}],
            "startTime": (self.pod.get("status") or {}).get("startTime") or now,
            "initContainerStatuses": [c.status() for c in self.init_containers],
            "containerStatuses": [c.status() for c in self.containers],
        }
        if self.pod_reason:
            status["reason"], status["message"] = self.pod_reason, self.pod_message
        if self.address:
            status["podIP"] = self.address
            status["podIPs"] = [{"ip": self.address}]
        return status

    def _report(self) -> None:
        if self.phase == "Pending" and self.initialized and any("running" in c.state for c in self.containers):
            self.phase = "Running"
        status = self._status()
        comparable = {
            **status,
            "conditions": [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status["conditions"]],
            "startTime": None,
        }
        if comparable == self.reported or self.vanished.is_set():
            return
        path = f"/api/v1/namespaces/{self.namespace}/pods/{self.pod_name}/status"
        try:
            updated = self.context.api.request(
                "PATCH", path, {"metadata": {"uid": self.uid}, "status": status}, content_type=MERGE_PATCH
            )
            self.pod = updated
            self.reported = comparable
        except ApiError as error:
            log.warning("pod %s/%s: status update failed: %s", self.namespace, self.pod_name, error)
        except OSError as error:
            log.warning(
                "pod %s/%s: status update failed (API server unreachable): %s", self.namespace, self.pod_name, error
            )

    def _delete_pod_object(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.uid},
        }
        for _ in range(30):
            try:
                self.context.api.request("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{self.pod_name}", body)
                return
            except ApiError as error:
                if error.status in (404, 409):
                    return
            except OSError:
                pass
            time.sleep(1)
