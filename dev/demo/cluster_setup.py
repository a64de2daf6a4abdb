"""What the examples expect of a cluster besides the Kubeflow operators: the shared volume, a namespace
enforcing the PodSecurity ``restricted`` profile; and, on the local cluster, pods steered to its
executing node (where they run for real).

Example 1 mounts the PersistentVolumeClaim ``training-data`` (datasets in, models out). On the local
cluster a ``local`` PersistentVolume backs it: a directory of the executing node, which the Airflow
worker on this machine reads and writes too; the kubelet (here the node runner) gives it the pods'
``fsGroup``, so that the example's non-root trainer may write into what the worker prepared. (A
``hostPath`` PersistentVolume would keep its owner: the kubelet applies no ``fsGroup`` to it.) On a real
cluster it is whatever ReadWriteMany storage the team uses.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

CLAIM_NAME = "training-data"


NODE_SELECTOR_ANNOTATION = "scheduler.alpha.kubernetes.io/node-selector"
TOLERATIONS_ANNOTATION = "scheduler.alpha.kubernetes.io/defaultTolerations"
EXEC_LABEL = "disttrain.dev/executing"
EXEC_NODE = "disttrain-exec-0"
RESTRICTED_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


def enforce_restricted(core_v1: Any, namespace: str, enforce: bool = True) -> None:
    """The API server's PodSecurity admission refuses every pod of ``namespace`` that does not meet the
    ``restricted`` profile, those the Kubeflow operators create included (``enforce=False``: the labels go)."""
    labels = {key: value if enforce else None for key, value in RESTRICTED_LABELS.items()}
    core_v1.patch_namespace(namespace, {"metadata": {"labels": labels}})


def steer_to_executing_node(core_v1: Any, namespace: str) -> None:
    """Every pod created in ``namespace`` gets the executing node's selector and toleration (the API
    server's PodNodeSelector and PodTolerationRestriction admission plugins read these annotations)."""
    toleration = {"key": EXEC_LABEL, "operator": "Exists", "effect": "NoSchedule"}
    annotations = {NODE_SELECTOR_ANNOTATION: f"{EXEC_LABEL}=true", TOLERATIONS_ANNOTATION: json.dumps([toleration])}
    core_v1.patch_namespace(namespace, {"metadata": {"annotations": annotations}})


def shared_storage(namespace: str) -> Path:
    """Where the local volume behind ``namespace``'s claim lives: the Airflow worker reads and writes there."""
    return Path(f"/tmp/disttrain-{namespace}")


def load_local_settings() -> ModuleType:
    """The local deployments' cluster policies (dev/airflow/airflow_local_settings.py), for a process that
    parses the examples itself (``dag.test()``); loaded under another name, so that Airflow never takes it
    for this process's own ``airflow_local_settings``."""
    path = Path(__file__).resolve().parents[1] / "airflow" / "airflow_local_settings.py"
    spec = importlib.util.spec_from_file_location("disttrain_dev_local_settings", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ensure_training_volume(api_client: Any, namespace: str) -> None:
    """Create (idempotently) a bound ``training-data`` claim in ``namespace``, on a local PersistentVolume
    of the executing node (its directory created here, as an administrator prepares a local volume)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    volume_name = f"{CLAIM_NAME}-{namespace}"
    shared_storage(namespace).mkdir(parents=True, exist_ok=True)
    on_exec_node = {"key": "kubernetes.io/hostname", "operator": "In", "values": [EXEC_NODE]}
    volume = {
        "metadata": {"name": volume_name},
        "spec": {
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteMany"],
            "local": {"path": str(shared_storage(namespace))},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [on_exec_node]}]}},
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"namespace": namespace, "name": CLAIM_NAME},
        },
    }
    claim = {
        "metadata": {"name": CLAIM_NAME},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "resources": {"requests": {"storage": "100Gi"}},
            "storageClassName": "",
            "volumeName": volume_name,
        },
    }
    try:
        existing = core.read_persistent_volume(volume_name)
    except ApiException as error:
        if error.status != 404:
            raise
    else:
        if existing.spec.local is None:  # a hostPath volume of an older set-up: fsGroup would not apply
            _delete_and_wait(core, namespace, volume_name)
    for create in (
        lambda: core.create_persistent_volume(volume),
        lambda: core.create_namespaced_persistent_volume_claim(namespace, claim),
    ):
        try:
            create()
        except ApiException as error:
            if error.status != 409:
                raise


def _delete_and_wait(core: Any, namespace: str, volume_name: str, timeout: float = 60) -> None:
    """Delete the claim and its volume, and wait until both are gone (a claim a pod uses stays until it ends)."""
    from kubernetes.client.exceptions import ApiException

    reads = (
        (lambda: core.read_namespaced_persistent_volume_claim(CLAIM_NAME, namespace),
         lambda: core.delete_namespaced_persistent_volume_claim(CLAIM_NAME, namespace)),
        (lambda: core.read_persistent_volume(volume_name), lambda: core.delete_persistent_volume(volume_name)),
    )  # fmt: skip
    for read, delete in reads:
        deadline = time.monotonic() + timeout
        while True:
            try:
                read()
                delete()
            except ApiException as error:
                if error.status != 404:
                    raise
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{namespace}/{CLAIM_NAME} or {volume_name} still exists after {timeout}s")
            time.sleep(0.5)
