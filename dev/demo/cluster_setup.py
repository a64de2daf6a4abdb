"""What the examples expect of a cluster besides the Kubeflow operators: the shared volume.

Example 1 mounts the PersistentVolumeClaim ``training-data`` (datasets in, models out). On the local
cluster a hostPath PersistentVolume backs it; on a real cluster it is whatever storage the team uses.
"""

from __future__ import annotations

from typing import Any

CLAIM_NAME = "training-data"


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
            "hostPath": {"path": f"/tmp/disttrain-{namespace}"},
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
