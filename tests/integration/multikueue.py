"""The MultiKueue environment of the integration tests: the worker cluster (``make integration-test`` starts it
beside the local one, ``DEVCLUSTER_WORKER=1``, dev/cluster/README.md "Two clusters") and, per test, its
namespace on both clusters with the LocalQueue ``multikueue`` and the Airflow connection of a service
account on the worker holding the provider's documented Role. The fixtures are registered in conftest.py.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import DEVCLUSTER_DIR, ROLE_FILE, SA_NAME

WORKER_KUBECONFIG = DEVCLUSTER_DIR / "worker" / "kubeconfig"
WORKER = "disttrain-worker"  # the MultiKueueCluster's name (dev/cluster/lib.sh MULTIKUEUE_CLUSTER)
QUEUE = "multikueue"  # the ClusterQueue with MultiKueue's admission check, and the LocalQueues' name
WORKER_CLUSTER_QUEUE = "cluster-queue"  # the worker's own ClusterQueue (its kwok nodes' 16 GPUs)
CONN_ID = "k8s_disttrain_worker"


@pytest.fixture(scope="session")
def worker_api() -> Any:
    """An admin ApiClient of the worker cluster; fails (never skips) when it is not up."""
    from kubernetes import client, config

    if not WORKER_KUBECONFIG.is_file():
        pytest.fail(
            f"{WORKER_KUBECONFIG} not found: start the worker cluster with `make cluster-up DEVCLUSTER_WORKER=1`"
        )
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(WORKER_KUBECONFIG), client_configuration=configuration)
    api = client.ApiClient(configuration)
    try:
        client.VersionApi(api).get_code()
    except Exception as error:
        pytest.fail(f"the worker cluster does not answer ({error!r}): run `make cluster-up DEVCLUSTER_WORKER=1`")
    return api


def _local_queue(custom: Any, namespace: str, cluster_queue: str) -> None:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": QUEUE},
        "spec": {"clusterQueue": cluster_queue},
    }
    custom.create_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "localqueues", body)


def _worker_kubeconfig(worker_api: Any, namespace: str, path: Path) -> Path:
    """A kubeconfig of a service account in ``namespace`` on the worker bound to the documented Role."""
    from kubernetes import client

    core, rbac = client.CoreV1Api(worker_api), client.RbacAuthorizationV1Api(worker_api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": SA_NAME}})
    role = yaml.safe_load(ROLE_FILE.read_text())
    rbac.create_namespaced_role(namespace, role)
    binding = {
        "metadata": {"name": SA_NAME},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": namespace}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)
    token = core.create_namespaced_service_account_token(SA_NAME, namespace, {"spec": {"expirationSeconds": 3600}})
    cluster = yaml.safe_load(WORKER_KUBECONFIG.read_text())["clusters"][0]["cluster"]
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "worker", "cluster": cluster}],
        "users": [{"name": SA_NAME, "user": {"token": token.status.token}}],
        "contexts": [{"name": "provider", "context": {"cluster": "worker", "user": SA_NAME}}],
        "current-context": "provider",
    }
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


@pytest.fixture
def multikueue(
    namespace: str, admin_api: Any, worker_api: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The test's namespace on both clusters with the LocalQueue ``multikueue``, and the worker's connection."""
    from kubernetes import client

    _local_queue(client.CustomObjectsApi(admin_api), namespace, QUEUE)
    core = client.CoreV1Api(worker_api)
    core.create_namespace({"metadata": {"name": namespace}})
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(core.delete_namespace, namespace, propagation_policy="Background")
        _local_queue(client.CustomObjectsApi(worker_api), namespace, WORKER_CLUSTER_QUEUE)
        kubeconfig = _worker_kubeconfig(worker_api, namespace, tmp_path / "worker-kubeconfig")
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}
        monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(connection))
        yield namespace
