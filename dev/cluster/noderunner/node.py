"""The Node object of the executing node: registration, its Lease (renewed every 10 s) and its status.

The node advertises the capacity the cluster declares (as kwok's nodes do: the examples ask more CPU,
memory and ``nvidia.com/gpu`` than this machine has; the training scripts fall back to CPU and gloo),
its kubelet endpoint (the log server's port on 127.0.0.1), and a taint that keeps every pod off it
unless the pod tolerates it: the integration tests and the demo steer their namespaces here.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from .kube import MERGE_PATCH, ApiClient, ApiError, now

log = logging.getLogger("noderunner.node")
LABEL = "disttrain.dev/executing"
LEASE_SECONDS = 40
RENEW_SECONDS = 10
VERSION = "disttrain-noderunner/0.1"


def node_object(name: str, capacity: dict[str, str], pod_cidr: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                LABEL: "true",
                "nvidia.com/gpu.present": "true",
            },
        },
        "spec": {
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
            "taints": [{"key": LABEL, "value": "true", "effect": "NoSchedule"}],
        },
    }


def node_status(name: str, address: str, port: int, capacity: dict[str, str]) -> dict[str, Any]:
    stamp = now()

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    return {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "declared capacity"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "declared capacity"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "declared capacity"),
            condition("Ready", "True", "KubeletReady", "disttrain node runner is posting ready status"),
        ],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "osImage": "the host (no images: see dev/cluster/README.md)",
            "kernelVersion": open("/proc/sys/kernel/osrelease").read().strip(),
            "containerRuntimeVersion": VERSION,
            "kubeletVersion": VERSION,
            "kubeProxyVersion": "",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }


def lease_body(name: str, node_uid: str) -> dict[str, Any]:
    micro = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro},
    }


class NodeKeeper(threading.Thread):
    """Registers the node, then renews its Lease and posts its status, re-registering if it was deleted."""

    def __init__(
        self,
        api: ApiClient,
        name: str,
        address: str,
        port: int,
        capacity: dict[str, str],
        pod_cidr: str,
        stopped: threading.Event,
    ) -> None:
        super().__init__(name="node-keeper", daemon=True)
        self.api, self.name, self.address, self.port = api, name, address, port
        self.capacity, self.pod_cidr, self.stopped = capacity, pod_cidr, stopped
        self.registered = threading.Event()

    def register(self) -> str:
        try:
            node = self.api.request("POST", "/api/v1/nodes", node_object(self.name, self.capacity, self.pod_cidr))
        except ApiError as error:
            if error.status != 409:
                raise
            node = self.api.get(f"/api/v1/nodes/{self.name}")
        self.post_status()
        return str(node["metadata"]["uid"])

    def post_status(self) -> None:
        body = {"status": node_status(self.name, self.address, self.port, self.capacity)}
        self.api.request("PATCH", f"/api/v1/nodes/{self.name}/status", body, content_type=MERGE_PATCH)

    def renew(self, uid: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        try:
            self.api.request("PATCH", path, {"spec": lease_body(self.name, uid)["spec"]}, content_type=MERGE_PATCH)
        except ApiError as error:
            if error.status != 404:
                raise
            self.api.request(
                "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease_body(self.name, uid)
            )

    def run(self) -> None:
        uid: str | None = None
        last_status = 0.0
        while not self.stopped.is_set():
            try:
                if uid is None:
                    uid = self.register()
                    last_status = time.monotonic()
                    self.registered.set()
                    log.info("node %s registered", self.name)
                self.renew(uid)
                if time.monotonic() - last_status > 60:
                    self.post_status()
                    last_status = time.monotonic()
            except ApiError as error:
                log.warning("node %s: %s", self.name, error)
                if error.status in (404, 409, 422):
                    uid = None  # the node (or its lease owner) is gone: register again
            except OSError as error:
                log.warning("node %s: API server unreachable: %s", self.name, error)
            self.stopped.wait(RENEW_SECONDS)
