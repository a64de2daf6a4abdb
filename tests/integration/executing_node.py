"""Steering a test namespace's pods to the local cluster's executing node (dev/cluster/noderunner).

The executing node carries the taint ``disttrain.dev/executing=true:NoSchedule``, so no pod lands on it
by accident. A namespace annotated by ``steer_to_executing_node`` (shared with the demo:
dev/demo/cluster_setup.py) gets, through the API server's PodNodeSelector and
PodTolerationRestriction admission plugins, a node selector and a toleration on every pod created in
it: the DAGs and manifests under test stay as users write them.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "demo"))

from cluster_setup import EXEC_NODE, enforce_restricted, ensure_training_volume, shared_storage, steer_to_executing_node

__all__ = [
    "EXEC_NODE",
    "RESTRICTED_CONTAINER_SECURITY",
    "RESTRICTED_POD_SECURITY",
    "enforce_restricted",
    "ensure_training_volume",
    "finished",
    "shared_storage",
    "steer_to_executing_node",
    "wait_for_pod",
]

# What the PodSecurity "restricted" profile asks of a pod and of each of its containers. The user id is
# explicit: runAsNonRoot alone needs an image that names a non-root user, and this node has no images.
# fsGroup makes the training-data volume (a local PersistentVolume) writable by that user.
RESTRICTED_POD_SECURITY: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "fsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER_SECURITY: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def wait_for_pod(
    core_v1: Any, namespace: str, name: str, predicate: Callable[[Any], bool], timeout: float = 60, what: str = ""
) -> Any:
    """The pod once ``predicate(pod)`` holds; fails with the pod's last status otherwise."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout
    pod = None
    while time.monotonic() < deadline:
        try:
            pod = core_v1.read_namespaced_pod(name, namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            pod = None
        if pod is not None and predicate(pod):
            return pod
        time.sleep(0.3)
    status = pod.status.to_dict() if pod is not None else "no such pod"
    raise AssertionError(
        f"pod {namespace}/{name}: timed out after {timeout}s waiting for {what or predicate}: {status}"
    )


def finished(pod: Any) -> bool:
    return pod.status.phase in ("Succeeded", "Failed")
