"""The cluster side of bench/trigger_scale.py, with the admin credentials: namespaces, the provider's
Role for a service account, the jobs, free pod slots, the API server's request counters, and the
reference watch that times each job's Succeeded transition independently of the measured process."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from trigger_scale_lib import parse_request_totals, release_run_seconds, wave_run_seconds

from airflow_provider_disttrain.hooks.api_errors import retry_transient
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.manifest.builder import JobParameters, build_manifest, set_identity
from airflow_provider_disttrain.manifest.validation import validate_manifest
from airflow_provider_disttrain.ownership.naming import task_instance_labels
from tests.integration.conftest import SA_NAME, SA_NAMESPACE

REPO = Path(__file__).resolve().parents[1]
ROLE_FILE = REPO / "deploy" / "rbac" / "role.yaml"
KIND = get_job_kind("PyTorchJob")
RUN_SECONDS_ANNOTATION = "disttrain.test/run-seconds"
HELD_RUN_SECONDS = "86400"  # every pod runs "a day" until the PodReleaser lets it finish
DAG_ID = "bench_trigger_scale"
BENCH_LABEL = "disttrain.test/bench"
CLEANUP_ATTEMPTS = 12  # about 70 s of backoff: longer than an API-server restart


def connection_json(kubeconfig: Path, namespace: str) -> str:
    """An Airflow ``kubernetes`` connection (as an AIRFLOW_CONN_ variable) for the service account."""
    return json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}
    )


class Cluster:
    """Admin access to the local cluster (a client certificate in group system:masters)."""

    def __init__(self, kubeconfig: Path, *, labelled: bool = True) -> None:
        self.labelled = labelled  # False: jobs without the provider's labels, as a sensor on a name meets them
        if not kubeconfig.is_file():
            raise SystemExit(f"{kubeconfig} not found: start the local cluster with `make cluster-up`")
        self.kubeconfig = kubeconfig
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        self.api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.api_port = urlparse(configuration.host).port or 443
        try:
            client.VersionApi(self.api).get_code()
        except Exception as error:
            raise SystemExit(
                f"the local cluster does not answer ({error!r}): start it with `make cluster-up`"
            ) from None
        self.run_id = f"bench__{time.strftime('%Y%m%dT%H%M%S')}"

    def create_namespace(self, namespace: str, workdir: Path) -> Path:
        """The namespace, with the provider's Role bound to the integration tests' service account, and
        that account's kubeconfig (a TokenRequest token), as tests/integration/conftest.py sets them up.
        Sharing that account lets ``ProviderRequests``' FlowSchemas count exactly its requests here."""
        self.core.create_namespace(
            {"metadata": {"name": namespace, "labels": {"disttrain.test/bench": "trigger-scale"}}}
        )
        for create in (
            lambda: self.core.create_namespace({"metadata": {"name": SA_NAMESPACE}}),
            lambda: self.core.create_namespaced_service_account(SA_NAMESPACE, {"metadata": {"name": SA_NAME}}),
        ):
            try:
                create()
            except ApiException as error:
                if error.status != 409:  # already there (the integration tests made it)
                    raise
        role = yaml.safe_load(ROLE_FILE.read_text())
        self.rbac.create_namespaced_role(namespace, role)
        self.rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": SA_NAME},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
                "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": SA_NAMESPACE}],
            },
        )
        token = self.core.create_namespaced_service_account_token(
            SA_NAME, SA_NAMESPACE, {"spec": {"expirationSeconds": 4 * 3600}}
        ).status.token
        admin = yaml.safe_load(self.kubeconfig.read_text())
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "devcluster", "cluster": admin["clusters"][0]["cluster"]}],
            "users": [{"name": SA_NAME, "user": {"token": token}}],
            "contexts": [{"name": "bench", "context": {"cluster": "devcluster", "user": SA_NAME}}],
            "current-context": "bench",
        }
        path = workdir / f"{namespace}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig))
        return path

    def delete_namespace(self, namespace: str, timeout: float = 300) -> None:
        """Delete it with everything in it and wait until it is gone, so that its pods free their slots.
        Outages are waited out (others restart the shared API server for their fault tests)."""
        if not self._delete(namespace):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._exists(namespace):
                return
            time.sleep(2)
        print(f"namespace {namespace} still terminating after {timeout:.0f}s; left to the namespace controller")

    @retry_transient(attempts=CLEANUP_ATTEMPTS)
    def _delete(self, namespace: str) -> bool:
        try:
            self.core.delete_namespace(namespace, propagation_policy="Background")
            return True
        except ApiException as error:
            if error.status == 404:
                return False
            raise

    @retry_transient(attempts=CLEANUP_ATTEMPTS)
    def _exists(self, namespace: str) -> bool:
        try:
            self.core.read_namespace(namespace)
            return True
        except ApiException as error:
            if error.status == 404:
                return False
            raise

    def manifest(self, namespace: str, name: str, index: int) -> dict[str, Any]:
        """A Master-only PyTorchJob asking for 10m cpu, labelled as the operators label their jobs (unless
        ``labelled`` is off); its pod runs until the PodReleaser shortens its run-seconds."""
        base = {"spec": {KIND.replica_specs_key: {"Master": {"replicas": 1, "restartPolicy": "Never"}}}}
        params = JobParameters(
            image="busybox:1.36",
            command=["python", "train.py"],
            resources={"requests": {"cpu": "10m", "memory": "16Mi"}},
            annotations={RUN_SECONDS_ANNOTATION: HELD_RUN_SECONDS},
        )
        labels = task_instance_labels(DAG_ID, f"train_{index:04d}", self.run_id, -1, 1) if self.labelled else {}
        manifest = set_identity(build_manifest(KIND, base, params), name, namespace, labels)
        validate_manifest(KIND, manifest)
        return manifest

    def create_job(self, namespace: str, name: str, index: int) -> dict[str, Any]:
        job = self.custom.create_namespaced_custom_object(
            KIND.resource.group,
            KIND.resource.version,
            namespace,
            KIND.resource.plural,
            self.manifest(namespace, name, index),
        )
        return {"uid": job["metadata"]["uid"], "created": time.time()}

    def free_pod_slots(self) -> int:
        """Pods the kwok nodes can still take: their pod capacity minus every pod not yet finished."""
        nodes = self.core.list_node(label_selector="type=kwok").items
        capacity = sum(int(node.status.allocatable.get("pods", 0)) for node in nodes)
        busy = self.core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed")
        return capacity - len(busy.items)

    def _metrics(self) -> str | None:
        try:
            response = self.api.call_api(
                "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
            )
            return response.data.decode()
        except Exception as error:  # a benchmark figure is missing, the run goes on
            print(f"reading /metrics failed: {error!r}")
            return None

    def request_totals(self) -> Counter[str] | None:
        """The API server's ``apiserver_request_total`` for pytorchjobs by verb (None if unreadable)."""
        text = self._metrics()
        return None if text is None else parse_request_totals(text)

    def apiserver_started(self) -> float | None:
        """When the API server process started (``process_start_time_seconds``), to tell a restart."""
        match = re.search(r"^process_start_time_seconds (\S+)$", self._metrics() or "", re.MULTILINE)
        return float(match.group(1)) if match else None

    def trigger_kwargs(self, conn_id: str, kubeconfig: Path, namespace: str) -> dict[str, Any]:
        """The connection arguments the operators hand their trigger, from the real hook: the kubeconfig
        file's content and the connection's other extras (as a task on a worker would ship them)."""
        from airflow_provider_disttrain.hooks.training_job import TrainingJobHook

        variable = f"AIRFLOW_CONN_{conn_id.upper()}"
        previous = os.environ.get(variable)
        os.environ[variable] = connection_json(kubeconfig, namespace)
        try:
            return {"connection": TrainingJobHook(conn_id=conn_id).trigger_connection().to_dict()}
        finally:
            if previous is None:
                del os.environ[variable]
            else:
                os.environ[variable] = previous


class NamespaceWatch(threading.Thread):
    """LIST then WATCH one resource type in one namespace, handing every object to ``see()``: resumes
    from the last resourceVersion, relists on 410 Gone, and after a broken connection (another
    engineer restarting the shared API server) watches again a second later."""

    def __init__(self, list_call: Callable[..., Any], *list_args: str) -> None:
        super().__init__(daemon=True)
        self.list_call = list_call
        self.list_args = list_args
        self.lock = threading.Lock()
        self.last_event = time.time()  # any change, for telling when the cluster has settled
        self.stopped = threading.Event()

    def see(self, event_type: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def run(self) -> None:
        resource_version = None
        while not self.stopped.is_set():
            try:
                if resource_version is None:
                    listed = json.loads(self.list_call(*self.list_args, _preload_content=False).data)
                    for obj in listed["items"]:
                        self.see("ADDED", obj)
                    resource_version = listed["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(
                    self.list_call,
                    *self.list_args,
                    resource_version=resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=600,
                ):
                    if self.stopped.is_set():
                        return
                    obj = event["raw_object"]
                    resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.last_event = time.time()
                        self.see(event["type"], obj)
            except ApiException as error:
                if error.status == 410:
                    resource_version = None  # too old: relist
                    continue
                time.sleep(1)
            except Exception:  # a broken connection: watch again from where it was
                time.sleep(1)

    def stop(self) -> None:
        self.stopped.set()


class ReferenceWatch(NamespaceWatch):
    """The time each job first shows Succeeded (or Failed) true, seen by one LIST + WATCH of the
    namespace in the benchmark's own process, outside the measured one, with the admin credentials."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        super().__init__(
            cluster.custom.list_namespaced_custom_object,
            KIND.resource.group,
            KIND.resource.version,
            namespace,
            KIND.resource.plural,
        )
        self._finished: dict[str, tuple[float, str]] = {}
        self._last_change = time.time()

    def see(self, event_type: str, job: dict[str, Any]) -> None:
        now = time.time()
        for condition in (job.get("status") or {}).get("conditions") or []:
            if condition.get("status") == "True" and condition.get("type") in ("Succeeded", "Failed"):
                name = job["metadata"]["name"]
                with self.lock:
                    if name not in self._finished:
                        self._finished[name] = (now, condition["type"])
                        self._last_change = now
                return

    def finished(self) -> dict[str, tuple[float, str]]:
        with self.lock:
            return dict(self._finished)

    def terminal_count(self) -> int:
        with self.lock:
            return len(self._finished)

    def last_change(self) -> float:
        with self.lock:
            return self._last_change


class PodReleaser(NamespaceWatch):
    """Holds every job's pod Running until ``release()``, then lets the pods finish staggered.

    The jobs' pods are created with a run time of a day. kwok re-reads the run-seconds annotation when
    it changes, so patching it to a few seconds ends the pod that long after the patch: the steady
    window can last as long as asked, whatever the operator's pace in creating the pods. The pods
    running at ``release()`` finish staggered over ``spread`` seconds; a pod that starts afterwards (a
    later wave, once a slot is free) is released as soon as it runs, with about ``wave_seconds`` to go.
    """

    def __init__(self, cluster: Cluster, namespace: str, spread: float, wave_seconds: float) -> None:
        super().__init__(cluster.core.list_namespaced_pod, namespace)
        self.cluster = cluster
        self.namespace = namespace
        self.spread = spread
        self.wave_seconds = wave_seconds
        self.held: set[str] = set()  # pods Running with the held run time
        self.pods: set[str] = set()  # every pod that exists
        self.released_at: float | None = None
        self.later = 0  # pods released after release(), one by one

    def _patch(self, name: str, seconds: float) -> None:
        body = {"metadata": {"annotations": {RUN_SECONDS_ANNOTATION: f"{seconds:.1f}"}}}
        try:
            self.cluster.core.patch_namespaced_pod(name, self.namespace, body)
        except ApiException as error:
            if error.status != 404:  # a pod gone meanwhile needs no release
                raise

    def see(self, event_type: str, pod: dict[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        name = metadata["name"]
        held = (metadata.get("annotations") or {}).get(RUN_SECONDS_ANNOTATION) == HELD_RUN_SECONDS
        running = event_type != "DELETED" and (pod.get("status") or {}).get("phase") == "Running" and held
        with self.lock:
            if event_type == "DELETED":
                self.pods.discard(name)
            else:
                self.pods.add(name)
            if not running:
                self.held.discard(name)
                return
            if self.released_at is None:
                self.held.add(name)
                return
            self.later += 1
            sequence = self.later
        self._patch(name, wave_run_seconds(sequence, self.wave_seconds))

    def pod_count(self) -> int:
        with self.lock:
            return len(self.pods)

    def running_held(self) -> int:
        with self.lock:
            return len(self.held)

    def release(self) -> int:
        """Let the pods running now finish, staggered; returns how many there were."""
        with self.lock:
            self.released_at = time.time()
            pods = sorted(self.held)
            self.held.clear()
        for position, name in enumerate(pods):
            self._patch(name, release_run_seconds(position, len(pods), self.spread))
        return len(pods)
