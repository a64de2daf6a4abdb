"""Integration fixtures: the local control plane (make cluster-up), a fresh namespace per test, and
the provider running as a service account bound only to the Role docs/guides/connection.md documents.

The admin credentials are used for setup and fault injection only; every operator, sensor, hook and
trigger under test talks to the API server as that service account, so a missing verb fails a test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_disttrain.parameters import WaitPolicy

REPO = Path(__file__).resolve().parents[2]
DEVCLUSTER_DIR = Path(os.environ.get("DEVCLUSTER_DIR", REPO / ".devcluster"))
ADMIN_KUBECONFIG = DEVCLUSTER_DIR / "kubeconfig"
ROLE_FILE = REPO / "deploy" / "rbac" / "role.yaml"
CLUSTER_ROLE_FILE = REPO / "deploy" / "rbac" / "clusterrole.yaml"
SA_NAMESPACE = "disttrain-it"
SA_NAME = "airflow-disttrain"
# Kueue (dev/cluster/controllers.sh): ClusterQueue with the 16 nvidia.com/gpu; the namespace fixture
# creates the LocalQueue. Not named `default`: Kueue queues unlabelled jobs in a queue of that name.
LOCAL_QUEUE = "user-queue"
CLUSTER_QUEUE = "cluster-queue"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def admin_api() -> Any:
    """An admin ApiClient; fails (never skips) when the cluster is not up."""
    from kubernetes import client, config

    if not ADMIN_KUBECONFIG.is_file():
        pytest.fail(f"{ADMIN_KUBECONFIG} not found: start the local cluster with `make cluster-up`")
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(ADMIN_KUBECONFIG), client_configuration=configuration)
    api = client.ApiClient(configuration)
    try:
        client.VersionApi(api).get_code()
    except Exception as error:
        pytest.fail(f"the local cluster does not answer ({error!r}): run `make cluster-up`")
    return api


@pytest.fixture(scope="session")
def service_account_kubeconfig(admin_api: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig for the provider's service account (token from the TokenRequest API)."""
    from kubernetes import client

    core = client.CoreV1Api(admin_api)
    _apply(lambda: core.create_namespace({"metadata": {"name": SA_NAMESPACE}}))
    _apply(lambda: core.create_namespaced_service_account(SA_NAMESPACE, {"metadata": {"name": SA_NAME}}))
    _bind_cluster_role(admin_api)
    token = core.create_namespaced_service_account_token(
        SA_NAME, SA_NAMESPACE, {"spec": {"expirationSeconds": 6 * 3600}}
    ).status.token
    admin = yaml.safe_load(ADMIN_KUBECONFIG.read_text())
    cluster = admin["clusters"][0]
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": cluster["cluster"]}],
        "users": [{"name": SA_NAME, "user": {"token": token}}],
        "contexts": [{"name": "provider", "context": {"cluster": "devcluster", "user": SA_NAME}}],
        "current-context": "provider",
    }
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


def _bind_cluster_role(admin_api: Any) -> None:
    """The documented ClusterRole (reading ClusterTrainingRuntimes), bound to the service account."""
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(admin_api)
    cluster_role = yaml.safe_load(CLUSTER_ROLE_FILE.read_text())
    name = cluster_role["metadata"]["name"]
    _apply(lambda: rbac.create_cluster_role(cluster_role))
    rbac.replace_cluster_role(name, cluster_role)  # the file may have changed since the last run
    binding = {
        "metadata": {"name": f"{name}-{SA_NAME}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": SA_NAMESPACE}],
    }
    _apply(lambda: rbac.create_cluster_role_binding(binding))


def _apply(create: Callable[[], Any]) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        create()
    except ApiException as error:
        if error.status != 409:
            raise


def _wait_for_local_queue(admin_api: Any, namespace: str, timeout: float = 30, name: str = LOCAL_QUEUE) -> None:
    """Waits until Kueue reports the LocalQueue Active: a job labelled for it before Kueue has seen it
    gets a Workload "LocalQueue ... doesn't exist" that is only retried a minute or so later."""
    from kubernetes import client

    custom = client.CustomObjectsApi(admin_api)
    deadline = time.monotonic() + timeout
    while True:
        queue = custom.get_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "localqueues", name)
        conditions = (queue.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Active" and c["status"] == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"Kueue did not make LocalQueue {namespace}/{name} Active in {timeout}s: {conditions}")
        time.sleep(0.2)


@pytest.fixture
def namespace(admin_api: Any, service_account_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh namespace where the service account holds exactly the documented Role.

    ``kubernetes_default`` points at the service account's kubeconfig with this namespace.
    """
    from kubernetes import client

    name = f"it-{secrets.token_hex(4)}"
    core = client.CoreV1Api(admin_api)
    rbac = client.RbacAuthorizationV1Api(admin_api)
    core.create_namespace({"metadata": {"name": name}})
    role = yaml.safe_load(ROLE_FILE.read_text())
    rbac.create_namespaced_role(name, role)
    rbac.create_namespaced_role_binding(
        name,
        {
            "metadata": {"name": SA_NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
            "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": SA_NAMESPACE}],
        },
    )
    # As a platform team sets up each namespace: a job labelled kueue.x-k8s.io/queue-name=user-queue
    # waits for quota in Kueue; an unlabelled one runs as before.
    client.CustomObjectsApi(admin_api).create_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        name,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE},
            "spec": {"clusterQueue": CLUSTER_QUEUE},
        },
    )
    _wait_for_local_queue(admin_api, name)
    connection = {
        "conn_type": "kubernetes",
        "extra": {"kube_config_path": str(service_account_kubeconfig), "namespace": name},
    }
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(connection))
    yield name
    core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def executing(admin_api: Any, namespace: str) -> str:
    """``namespace``, with every pod created in it steered to the executing node, where it runs for real."""
    from kubernetes import client

    from tests.integration.executing_node import steer_to_executing_node

    steer_to_executing_node(client.CoreV1Api(admin_api), namespace)
    return namespace


@pytest.fixture
def jobs(admin_api: Any) -> Any:
    """Admin-side reads of training jobs and pods, for assertions."""
    from kubernetes import client

    class Jobs:
        custom = client.CustomObjectsApi(admin_api)
        core = client.CoreV1Api(admin_api)

        def list(self, plural: str, namespace: str, version: str = "v1") -> list[dict[str, Any]]:
            return self.custom.list_namespaced_custom_object("kubeflow.org", version, namespace, plural)["items"]

        def get(self, plural: str, namespace: str, name: str, version: str = "v1") -> dict[str, Any] | None:
            from kubernetes.client.exceptions import ApiException

            try:
                return self.custom.get_namespaced_custom_object("kubeflow.org", version, namespace, plural, name)
            except ApiException as error:
                if error.status == 404:
                    return None
                raise

        def pods(self, namespace: str, job_name: str) -> list[Any]:
            selector = f"training.kubeflow.org/job-name={job_name}"
            return self.core.list_namespaced_pod(namespace, label_selector=selector).items

        def wait_for(self, predicate: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
            deadline = time.monotonic() + timeout
            while not predicate():
                if time.monotonic() > deadline:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
                time.sleep(0.5)

    return Jobs()


def cluster_script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run one of dev/cluster/*.sh (fault injection), failing the test with its output on error."""
    result = subprocess.run(
        ["bash", str(REPO / "dev" / "cluster" / name), *args], text=True, capture_output=True, check=False, timeout=180
    )
    if result.returncode != 0:
        raise AssertionError(f"cluster/{name} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


class DagRunResult:
    """What a ``dag.test()`` run left behind: the run, each task's state and its XComs."""

    def __init__(self, dag_run: Any) -> None:
        self.dag_run = dag_run
        self.state = str(dag_run.state)
        self.task_states = {(ti.task_id, ti.map_index): str(ti.state) for ti in dag_run.get_task_instances()}

    def task_state(self, task_id: str, map_index: int = -1) -> str:
        return self.task_states[(task_id, map_index)]

    def xcom(self, task_id: str, key: str = "return_value", map_index: int = -1) -> Any:
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            row = (
                session.query(XComModel)
                .filter_by(
                    dag_id=self.dag_run.dag_id,
                    run_id=self.dag_run.run_id,
                    task_id=task_id,
                    key=key,
                    map_index=map_index,
                )
                .first()
            )
            return XComModel.deserialize_value(row) if row else None


@pytest.fixture
def run_dag(airflow_db: Path) -> Callable[..., DagRunResult]:
    """Write a DAG file into the DAGs folder and run it with the real Airflow runtime (``dag.test()``)."""

    def run(dag_id: str, source: str, **test_kwargs: Any) -> DagRunResult:
        from airflow.dag_processing.dagbag import DagBag

        path = airflow_db / f"{dag_id}.py"
        path.write_text(source)
        bag = DagBag(str(path))
        assert not bag.import_errors, bag.import_errors
        return DagRunResult(bag.get_dag(dag_id).test(**test_kwargs))

    return run


# In sync mode two clocks race: the wait's own execution deadline (counted from the task's start_date, so
# the earlier one) and Airflow's signal timer (from the call to execute). Which ends the task depends on
# how long the task took to reach execute (dag.test's first task waits for its in-process API server);
# either must leave the job as cleanup_policy.on_timeout says.
SYNC_TIMEOUT = r"AirflowTaskTimeout|did not finish within the task's execution_timeout"


@pytest.fixture
def example_dags(airflow_db: Path) -> Path:
    """The examples copied into the DAGs folder (with the manifest next to them), as a user deploys them:
    one copy for every test of the session (a DAG id may live in one file of the folder only)."""
    target = airflow_db / "examples"
    shutil.copytree(Path(__file__).resolve().parents[2] / "example_dags", target, dirs_exist_ok=True)
    return target


def unique_dag_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(3)}"


TRAINING_DAG = """
import datetime

import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator

@dag(dag_id={dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    PyTorchJobOperator(task_id="train", {arguments})

pipeline()
"""
TRAINING_DEFAULTS: dict[str, Any] = {
    "image": "busybox:1.36",
    "command": ["python", "train.py"],
    "num_workers": 1,
    "wait_policy": WaitPolicy(poll_interval=1),
}


def with_defaults(defaults: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` over ``defaults``; a ``WaitPolicy`` given without its own poll interval keeps the
    defaults' (the tests poll every second, not every 10 s)."""
    merged = {**defaults, **arguments}
    policy, fast = merged.get("wait_policy"), defaults.get("wait_policy")
    if (
        isinstance(policy, WaitPolicy)
        and isinstance(fast, WaitPolicy)
        and policy.poll_interval == WaitPolicy.poll_interval
    ):
        merged["wait_policy"] = dataclasses.replace(policy, poll_interval=fast.poll_interval)
    return merged


def training_dag(dag_id: str, **operator_args: Any) -> str:
    """Source of a one-task DAG training a small PyTorchJob; ``operator_args`` override the defaults."""
    arguments = ", ".join(f"{key}={value!r}" for key, value in with_defaults(TRAINING_DEFAULTS, operator_args).items())
    return TRAINING_DAG.format(dag_id=dag_id, arguments=arguments)


# -- Kueue: a queue and nodes of one's own ------------------------------------------------------------------

KUEUE = ("kueue.x-k8s.io", "v1beta2")
SMALL_QUEUE = "small-queue"
# The label and NoSchedule taint of a test's own kwok nodes; the value names the pool.
POOL_LABEL = "disttrain.dev/pool"


# The scheduler's word for a pod asking more GPUs than a node has: the two shared kwok nodes lack the GPUs,
# the executing node (dev/cluster/noderunner) and the nodes of any test's pool running at once are tainted
# (the scheduler sorts its reasons as strings, counts first: either may come first).
_NO_GPU = r"2 Insufficient nvidia\.com/gpu"
_TAINTED = r"\d+ node\(s\) had untolerated taint\(s\)"
NO_GPU_NODE = re.compile(rf"Unschedulable: 0/\d+ nodes are available: ({_NO_GPU}, {_TAINTED}|{_TAINTED}, {_NO_GPU})\.")


def kueue_condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def wait_until(what: str, probe: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.5)
    return value


@dataclasses.dataclass(frozen=True)
class GpuPool:
    """kwok nodes of one test's own, labelled and tainted with ``POOL_LABEL=name``, and a ResourceFlavor
    ``flavor`` of those labels and the taint's toleration. Kueue injects a flavor's nodeLabels and
    tolerations into the pods it admits, so a job admitted on this flavor runs on these nodes only, and
    no other test's pod (none tolerates the taint) takes their GPUs: Kueue's quota is not node capacity."""

    name: str
    flavor: str
    nodes: tuple[str, ...]

    @property
    def node_selector(self) -> dict[str, str]:
        return {POOL_LABEL: self.name}

    @property
    def tolerations(self) -> list[dict[str, str]]:
        return [{"key": POOL_LABEL, "operator": "Equal", "value": self.name, "effect": "NoSchedule"}]


def _pool_node(pool: GpuPool, name: str, gpus: int) -> dict[str, Any]:
    """A Node kwok fakes (its annotation selector, dev/cluster/up.sh), shaped like dev/cluster/kwok/nodes.yaml."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                "nvidia.com/gpu.present": "true",
                **pool.node_selector,
            },
        },
        "spec": {"taints": [{"key": POOL_LABEL, "value": pool.name, "effect": "NoSchedule"}]},
        "status": {"capacity": resources, "allocatable": resources},
    }


def _schedulable(node: Any) -> bool:
    """Ready, and rid of the not-ready taint the node lifecycle controller puts on every new node."""
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return ready and not any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints or [])


def _delete_pool_node(core: Any, name: str) -> None:
    """Deletes the node after its pods (at once: without the node no kubelet, not even kwok's, would confirm
    their deletion, and they would wait for the pod garbage collector). A job still there recreates its
    pods Pending, for the namespace's deletion to take."""
    from kubernetes.client.exceptions import ApiException

    for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items:
        with contextlib.suppress(ApiException):  # gone already
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
    core.delete_node(name)


@contextlib.contextmanager
def gpu_pool(admin_api: Any, namespace: str, *, nodes: int = 1, gpus_per_node: int = 8) -> Iterator[GpuPool]:
    """``nodes`` kwok nodes of ``gpus_per_node`` GPUs and their ResourceFlavor, Ready once this enters and
    deleted when it exits (on failure too; Kueue's finalizer keeps the flavor until no ClusterQueue uses it)."""
    from kubernetes import client

    core, custom = client.CoreV1Api(admin_api), client.CustomObjectsApi(admin_api)
    name = f"{namespace}-{secrets.token_hex(3)}"
    pool = GpuPool(name, flavor=f"pool-{name}", nodes=tuple(f"pool-{name}-{i}" for i in range(nodes)))
    with contextlib.ExitStack() as cleanup:
        for node in pool.nodes:
            core.create_node(_pool_node(pool, node, gpus_per_node))
            cleanup.callback(_delete_pool_node, core, node)
        custom.create_cluster_custom_object(
            *KUEUE,
            "resourceflavors",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": pool.flavor},
                "spec": {"nodeLabels": pool.node_selector, "tolerations": pool.tolerations},
            },
        )
        cleanup.callback(custom.delete_cluster_custom_object, *KUEUE, "resourceflavors", pool.flavor)
        for node in pool.nodes:
            wait_until(f"node {node} Ready", lambda node=node: _schedulable(core.read_node(node)))
        yield pool


class SmallQueue:
    """A LocalQueue ``SMALL_QUEUE`` in the test's namespace, on a ClusterQueue of 8 GPUs of its own in the
    ResourceFlavor ``flavor`` of a ``GpuPool``."""

    def __init__(self, custom: Any, namespace: str, cluster_queue: str, flavor: str, name: str = SMALL_QUEUE) -> None:
        self.custom, self.namespace, self.cluster_queue, self.name = custom, namespace, cluster_queue, name
        self.flavor = flavor

    def get_cluster_queue(self) -> dict[str, Any]:
        return self.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", self.cluster_queue)

    def stop(self) -> None:
        self.custom.patch_cluster_custom_object(
            *KUEUE, "clusterqueues", self.cluster_queue, {"spec": {"stopPolicy": "Hold"}}
        )

    def stop_local_queue(self) -> None:
        self.custom.patch_namespaced_custom_object(
            *KUEUE, self.namespace, "localqueues", self.name, {"spec": {"stopPolicy": "Hold"}}
        )

    def workloads(self) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(*KUEUE, self.namespace, "workloads")["items"]

    def submit_blocker(self, name: str, gpus: int, run_seconds: int) -> None:
        """A PyTorchJob of ``gpus`` GPUs in the queue, as another user would submit it (admin, no provider)."""
        container = {"name": "pytorch", "image": "busybox:1.36", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        template = {"metadata": {"annotations": {"disttrain.test/run-seconds": str(run_seconds)}}}
        template["spec"] = {"containers": [container]}
        self.custom.create_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            self.namespace,
            "pytorchjobs",
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": self.name}},
                "spec": {
                    "pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
                },
            },
        )


@contextlib.contextmanager
def own_queue(
    custom: Any,
    namespace: str,
    local_queue: str,
    *,
    gpus: int,
    flavor: str,
    preemption: dict[str, Any] | None = None,
) -> Iterator[str]:
    """A LocalQueue ``local_queue`` in ``namespace`` on a ClusterQueue of ``gpus`` GPUs of its own (only that
    namespace's jobs) in ``flavor`` (a ``GpuPool``'s: its jobs run on the pool's nodes), Active once this
    enters: the test neither waits for nor takes the shared queue's quota or nodes. Yields the ClusterQueue's
    name and deletes it when it exits (Kueue's finalizer keeps it until its Workloads are gone with the
    namespace; the LocalQueue goes with the namespace)."""
    cluster_queue = f"{local_queue}-{secrets.token_hex(3)}"
    quota = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [
            {
                "coveredResources": list(quota),
                "flavors": [{"name": flavor, "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()]}],
            }
        ],
    }
    if preemption is not None:
        spec["preemption"] = preemption
    custom.create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": spec,
        },
    )
    try:
        _create_local_queue(custom, namespace, local_queue, cluster_queue)
        yield cluster_queue
    finally:
        custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue)


def _create_local_queue(custom: Any, namespace: str, local_queue: str, cluster_queue: str) -> None:
    custom.create_namespaced_custom_object(
        *KUEUE,
        namespace,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": local_queue},
            "spec": {"clusterQueue": cluster_queue},
        },
    )
    wait_until(
        f"LocalQueue {local_queue} Active",
        lambda: (
            kueue_condition(
                custom.get_namespaced_custom_object(*KUEUE, namespace, "localqueues", local_queue), "Active"
            ).get("status")
            == "True"
        ),
    )


@pytest.fixture
def small_queue(admin_api: Any, namespace: str) -> Iterator[SmallQueue]:
    from kubernetes import client

    custom = client.CustomObjectsApi(admin_api)
    with (
        gpu_pool(admin_api, namespace) as pool,
        own_queue(custom, namespace, SMALL_QUEUE, gpus=8, flavor=pool.flavor) as cluster_queue,
    ):
        yield SmallQueue(custom, namespace, cluster_queue, pool.flavor)


# -- MultiKueue ---------------------------------------------------------------------------------------
# The worker cluster (``make integration-test`` starts it beside the local one, ``DEVCLUSTER_WORKER=1``,
# dev/cluster/README.md "Two clusters") and, per test, its namespace on both clusters with the LocalQueue
# ``multikueue`` and the Airflow connection of a service account on the worker holding the documented Role.

WORKER_KUBECONFIG = DEVCLUSTER_DIR / "worker" / "kubeconfig"
WORKER_CLUSTER = "disttrain-worker"  # the MultiKueueCluster's name (dev/cluster/lib.sh MULTIKUEUE_CLUSTER)
MULTIKUEUE_QUEUE = "multikueue"  # the ClusterQueue with MultiKueue's admission check, and the LocalQueues' name
WORKER_CLUSTER_QUEUE = "cluster-queue"  # the worker's own ClusterQueue (its kwok nodes' 16 GPUs)
MULTIKUEUE_CONN_ID = "k8s_disttrain_worker"


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
        "metadata": {"name": MULTIKUEUE_QUEUE},
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

    _local_queue(client.CustomObjectsApi(admin_api), namespace, MULTIKUEUE_QUEUE)
    core = client.CoreV1Api(worker_api)
    core.create_namespace({"metadata": {"name": namespace}})
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(core.delete_namespace, namespace, propagation_policy="Background")
        _local_queue(client.CustomObjectsApi(worker_api), namespace, WORKER_CLUSTER_QUEUE)
        # Both Active before a job is labelled for them (see _wait_for_local_queue).
        _wait_for_local_queue(admin_api, namespace, name=MULTIKUEUE_QUEUE)
        _wait_for_local_queue(worker_api, namespace, name=MULTIKUEUE_QUEUE)
        kubeconfig = _worker_kubeconfig(worker_api, namespace, tmp_path / "worker-kubeconfig")
        connection = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}
        monkeypatch.setenv(f"AIRFLOW_CONN_{MULTIKUEUE_CONN_ID.upper()}", json.dumps(connection))
        yield namespace
