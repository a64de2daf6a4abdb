"""MultiKueue with an MPIJob: dispatched to the worker cluster, run there by the worker's mpi-operator.

The worker's mpi-operator runs in a network namespace of its own (dev/cluster/README.md "Two clusters",
"mpi-operator in a network namespace"). Through the public ``MPIJobOperator`` and the real runtime
(``dag.test()``), sync and deferred: the job's Workload is dispatched to ``disttrain-worker``, its
launcher Job completes there, the result names the worker cluster, and no pod ran on the manager.

The fixtures are copied from tests/integration/test_multikueue.py of the branch that adds it (not yet
on this branch's parent); once both are merged they belong in one shared module.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import DEVCLUSTER_DIR, ROLE_FILE, SA_NAME, unique_dag_id

WORKER_KUBECONFIG = DEVCLUSTER_DIR / "worker" / "kubeconfig"
WORKER = "disttrain-worker"  # the MultiKueueCluster's name (dev/cluster/lib.sh MULTIKUEUE_CLUSTER)
QUEUE = "multikueue"  # the ClusterQueue with MultiKueue's admission check, and the LocalQueues' name
WORKER_CLUSTER_QUEUE = "cluster-queue"  # the worker's own ClusterQueue (its kwok nodes' 16 GPUs)
CONN_ID = "k8s_disttrain_worker"

DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy


@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    MPIJobOperator(
        task_id="train",
        image="mpioperator/mpi-pi:openmpi",
        command=["mpirun", "-n", "1", "/home/mpiuser/pi"],
        num_workers=1,
        gpus_per_replica=1,
        local_queue={queue!r},
        worker_clusters={{{worker!r}: {conn_id!r}}},
        annotations={{"disttrain.test/run-seconds": "4"}},
        deferrable={deferrable!r},
        wait_policy=WaitPolicy(poll_interval=1, startup_timeout=120),
    )


pipeline()
"""


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


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_dispatched_mpijob_runs_on_the_worker_cluster(
    multikueue: str, run_dag: Any, admin_api: Any, capfd: pytest.CaptureFixture[str], deferrable: bool
) -> None:
    from kubernetes import client

    dag_id = unique_dag_id("multikueue_mpi")
    source = DAG.format(dag_id=dag_id, queue=QUEUE, worker=WORKER, conn_id=CONN_ID, deferrable=deferrable)
    result = run_dag(dag_id, source)

    output = "".join(capfd.readouterr())
    assert result.task_state("train") == "success", output[-4000:]
    value = result.xcom("train")
    assert value["kind"] == "MPIJob"
    assert value["state"] == "succeeded"
    assert value["cluster"] == WORKER
    # Mirrored from the worker: only its mpi-operator ran this job (the manager's leaves a job that
    # MultiKueue manages alone).
    assert value["replica_statuses"]["Launcher"]["succeeded"] == 1
    manager_pods = client.CoreV1Api(admin_api).list_namespaced_pod(multikueue).items
    assert manager_pods == [], "the job's pods must run on the worker only"
    manager_jobs = client.BatchV1Api(admin_api).list_namespaced_job(multikueue).items
    assert manager_jobs == [], "the launcher Job must be created on the worker only"
