"""What the examples expect of a cluster besides the Kubeflow operators: the shared volume; and, on the local
cluster, pods steered to its executing node (where they run for real).

Example 1 mounts the PersistentVolumeClaim ``training-data`` (datasets in, models out). On the local
cluster a hostPath PersistentVolume backs it; on a real cluster it is whatever storage the team uses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CLAIM_NAME = "training-data"


NODE_SELECTOR_ANNOTATION = "scheduler.alpha.kubernetes.io/node-selector"
TOLERATIONS_ANNOTATION = "scheduler.alpha.kubernetes.io/defaultTolerations"
EXEC_LABEL = "disttrain.dev/executing"


def steer_to_executing_node(core_v1: Any, namespace: str) -> None:
    """Every pod created in ``namespace`` gets the executing node's selector and toleration (the API
    server's PodNodeSelector and PodTolerationRestriction admission plugins read these annotations)."""
    toleration = {"key": EXEC_LABEL, "operator": "Exists", "effect": "NoSchedule"}
    annotations = {NODE_SELECTOR_ANNOTATION: f"{EXEC_LABEL}=true", TOLERATIONS_ANNOTATION: json.dumps([toleration])}
    core_v1.patch_namespace(namespace, {"metadata": {"annotations": annotations}})


def shared_storage(namespace: str) -> Path:
    """Where the hostPath volume behind ``namespace``'s claim lives: the Airflow worker reads and writes there."""
    return Path(f"/tmp/disttrain-{namespace}")


def ensure_training_volume(api_client: Any, namespace: str) -> None:
    """Create (idempotently) a bound ``training-data`` claim in ``namespace``."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    volume_name = f"{CLAIM_NAME}-{namespace}"
    volume = {
        "metadata": {"name": volume_name},
        "spec": {
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteMany"],
            "hostPath": {"path": str(shared_storage(namespace)), "type": "DirectoryOrCreate"},
            "storageClassName": "",
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
    for create in (
        lambda: core.create_persistent_volume(volume),
        lambda: core.create_namespaced_persistent_volume_claim(namespace, claim),
    ):
        try:
            create()
        except ApiException as error:
            if error.status != 409:
                raise
