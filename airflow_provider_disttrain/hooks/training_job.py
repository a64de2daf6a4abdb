"""Synchronous Kubernetes I/O for training jobs, on top of the cncf provider's connection handling.

``TrainingJobHook`` reuses ``KubernetesHook`` for everything about the ``kubernetes`` connection
(kubeconfig path or content, in-cluster, context, namespace) and adds the calls a training task
makes. It returns plain dicts (what the API server sent), so the pure modules can read them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any

import yaml
from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from kubernetes import client

from airflow_provider_disttrain.exceptions import JobAlreadyExistsError, TrainingJobError
from airflow_provider_disttrain.failures.controller_refusal import warning_events_selector
from airflow_provider_disttrain.failures.diagnostics import Evidence, event_objects, logs_to_read
from airflow_provider_disttrain.hooks.api_errors import (
    api_status,
    delete_body,
    means_job_absent,
    names_object,
    raise_for_access,
    retry_transient,
)
from airflow_provider_disttrain.hooks.rejections import field_error
from airflow_provider_disttrain.job.kinds import TRAINING_RUNTIME_KINDS, JobKind, get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.kube.connection import ClusterConnection, minimal_kubeconfig
from airflow_provider_disttrain.kube.resources import ApiResource
from airflow_provider_disttrain.kueue.dispatch import WORKER_CLUSTERS
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, WORKLOAD, workload_of
from airflow_provider_disttrain.kueue.position import parse_summary, pending_workloads_path
from airflow_provider_disttrain.ownership.naming import label_selector
from airflow_provider_disttrain.utils.clock import SYSTEM, Clock

# Connection extras that point at kubeconfig material; dropped when the material itself is shipped.
# The cncf hooks also read them under the pre-2.3 prefix, so both spellings go.
_KUBECONFIG_EXTRAS = ("kube_config_path", "kube_config", "in_cluster")
_LEGACY_EXTRA_PREFIX = "extra__kubernetes__"
LOG_TAIL_LINES = 30
_POD_LOG_ACCEPTS = ["text/plain", "application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]
LIST_PAGE_SIZE = 500
"""Objects per page of a paged LIST (``job_pages``), as the triggerer's shared watch lists."""


class TrainingJobHook(KubernetesHook):
    """Create, read, patch and delete Kubeflow training jobs and read their pods, logs and events."""

    hook_name = "Kubeflow Training Job"

    @cached_property
    def _custom(self) -> client.CustomObjectsApi:
        return self.custom_object_client

    def _to_dict(self, obj: Any) -> dict[str, Any]:
        return self.api_client.sanitize_for_serialization(obj)

    def default_namespace(self) -> str:
        return self.get_namespace() or "default"

    @retry_transient()
    def _create(self, kind: JobKind, manifest: Mapping[str, Any], namespace: str, dry_run: bool) -> Any:
        return self._custom.create_namespaced_custom_object(
            **kind.resource.namespaced_path(namespace),
            body=dict(manifest),
            dry_run="All" if dry_run else None,
            # Refuse a field the schema does not know instead of silently dropping it (``rejections``).
            field_validation="Strict",
        )

    def create_job(
        self, kind: str | JobKind, manifest: Mapping[str, Any], namespace: str, *, dry_run: bool = False
    ) -> dict[str, Any]:
        """Create the job; ``dry_run`` asks the API server to validate and admit it without storing it."""
        kind = get_job_kind(kind)
        name = manifest.get("metadata", {}).get("name")
        try:
            return self._create(kind, manifest, namespace, dry_run)
        except Exception as error:
            # A refused spec first: an admission webhook refuses with 403, like RBAC does.
            if refused := field_error(error, f"create {kind.kind} {namespace}/{name}"):
                raise refused from error
            raise_for_access(error, f"create {kind.kind} {namespace}/{name}")
            if api_status(error) == 409:
                raise JobAlreadyExistsError(f"{kind.kind} {namespace}/{name} already exists") from error
            raise

    @retry_transient()
    def get_job(self, kind: str | JobKind, name: str, namespace: str) -> dict[str, Any] | None:
        """The job object, or None when it does not exist."""
        kind = get_job_kind(kind)
        try:
            return self._custom.get_namespaced_custom_object(**kind.resource.namespaced_path(namespace), name=name)
        except Exception as error:
            if means_job_absent(error):
                return None
            raise_for_access(error, f"get {kind.kind} {namespace}/{name}")
            raise

    @retry_transient()
    def find_jobs(self, kind: str | JobKind, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        """Jobs carrying all of ``labels``, oldest first."""
        kind = get_job_kind(kind)
        try:
            listing = self._custom.list_namespaced_custom_object(
                **kind.resource.namespaced_path(namespace),
                label_selector=label_selector(labels),
            )
        except Exception as error:
            raise_for_access(error, f"list {kind.resource.plural} in {namespace}")
            raise
        items = listing.get("items", [])
        return sorted(items, key=lambda job: job.get("metadata", {}).get("creationTimestamp") or "")

    def job_pages(
        self, kind: str | JobKind, namespace: str, selector: str, page_size: int | None = None
    ) -> Iterator[list[dict[str, Any]]]:
        """The jobs ``selector`` (a label selector) selects, one page (``limit``) at a time, as client-go's
        pager lists: a namespace's history of finished jobs can be thousands, which one answer would hold
        in memory at once. The pages are of one snapshot (the continue token pins its resourceVersion);
        a token that expired meanwhile (410 Gone, after minutes) is raised, for the caller to list again."""
        kind = get_job_kind(kind)
        token: str | None = None
        while True:
            page = self._list_page(kind, namespace, selector, page_size or LIST_PAGE_SIZE, token)
            yield list(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    @retry_transient()
    def _list_page(
        self, kind: JobKind, namespace: str, selector: str, page_size: int, token: str | None
    ) -> dict[str, Any]:
        try:
            return self._custom.list_namespaced_custom_object(  # type: ignore[no-any-return]
                **kind.resource.namespaced_path(namespace),
                label_selector=selector,
                limit=page_size,
                _continue=token,  # None: the first page (the client sends no parameter)
            )
        except Exception as error:
            raise_for_access(error, f"list {kind.resource.plural} in {namespace}")
            raise

    @retry_transient()
    def find_workload(self, namespace: str, job_uid: str) -> dict[str, Any] | None:
        """The Kueue Workload of the job of ``job_uid`` (Kueue names it itself: found by its job-uid label)."""
        listing = self._custom.list_namespaced_custom_object(
            **WORKLOAD.namespaced_path(namespace),
            label_selector=f"{JOB_UID_LABEL}={job_uid}",
        )
        workload = workload_of(listing.get("items") or [], job_uid)
        return dict(workload) if workload is not None else None

    @retry_transient()
    def list_workloads(self, namespace: str, max_pages: int = 2) -> list[dict[str, Any]]:
        """The Workloads of the namespace's jobs (those with Kueue's job-uid label), at most ``max_pages``
        pages of ``LIST_PAGE_SIZE``: the admission history a queued job's start is estimated from
        (``kueue.estimate``), read once per position refresh, not once per poll."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        for _ in range(max_pages):
            page = self._custom.list_namespaced_custom_object(
                **WORKLOAD.namespaced_path(namespace),
                label_selector=JOB_UID_LABEL,
                limit=LIST_PAGE_SIZE,
                _continue=token,  # None: the first page (the client sends no parameter)
            )
            items.extend(page.get("items") or [])
            if not (token := (page.get("metadata") or {}).get("continue")):
                break
        return items

    @retry_transient()
    def pending_workloads(self, namespace: str, local_queue: str) -> dict[str, Any]:
        """Kueue's visibility API: the pending Workloads of a LocalQueue, in order (``kueue_position``).

        Raw GET through the client's ``call_api``: the generated clients have no method for an aggregated
        API's subresource. Errors are raised as the client raised them (403: the Role lacks ``get`` on
        ``localqueues/pendingworkloads``; 404/503: the visibility API is not served) for the caller.
        """
        response = self.core_v1_client.api_client.call_api(
            pending_workloads_path(namespace, local_queue),
            "GET",
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,  # parsed here: the clients' versions name the response type differently
        )
        return parse_summary(response.data)

    @retry_transient()
    def get_kueue_queue(self, resource: ApiResource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """A Kueue LocalQueue (in ``namespace``) or ClusterQueue, or None when no such object exists.

        Every other error is raised as the client raised it (a 403, a 404 that names no object: Kueue's
        CRDs are not installed), for the caller to judge: the check before submitting goes on without it.
        """
        try:
            if resource.namespaced:
                assert namespace is not None
                return self._custom.get_namespaced_custom_object(**resource.namespaced_path(namespace), name=name)
            return self._custom.get_cluster_custom_object(**resource.cluster_path(), name=name)
        except Exception as error:
            if api_status(error) == 404 and names_object(error, name):
                return None
            raise

    @retry_transient()
    def patch_job(self, kind: str | JobKind, name: str, namespace: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch of the job (spec fields such as replicas or runPolicy.suspend)."""
        kind = get_job_kind(kind)
        try:
            return self._custom.patch_namespaced_custom_object(
                **kind.resource.namespaced_path(namespace),
                name=name,
                body=dict(patch),
                field_validation="Strict",
            )
        except Exception as error:
            if refused := field_error(error, f"patch {kind.kind} {namespace}/{name}"):
                raise refused from error
            raise_for_access(error, f"patch {kind.kind} {namespace}/{name}")
            raise

    @retry_transient()
    def delete_job(
        self,
        kind: str | JobKind,
        name: str,
        namespace: str,
        *,
        uid: str | None = None,
        propagation_policy: str = "Background",
    ) -> bool:
        """Delete the job and, through owner references, its pods. False when it was already gone.

        ``uid`` is a precondition: a job of the same name created since (a retry's replacement) is
        left alone.
        """
        kind = get_job_kind(kind)
        try:
            self._custom.delete_namespaced_custom_object(
                **kind.resource.namespaced_path(namespace),
                name=name,
                body=delete_body(uid, propagation_policy),
            )
            return True
        except Exception as error:
            if means_job_absent(error, uid_precondition=True):
                return False
            raise_for_access(error, f"delete {kind.kind} {namespace}/{name}")
            raise

    def delete_and_wait(
        self,
        kind: str | JobKind,
        name: str,
        namespace: str,
        *,
        uid: str | None = None,
        timeout: float = 120.0,
        interval: float = 1.0,
        clock: Clock = SYSTEM,
    ) -> bool:
        """Delete the job and wait until the API server no longer has it (its finalizers are done).

        False when it was already gone, or (``uid`` given) the name holds another job. Done as soon as
        the name is free or holds a job of another uid (someone created one since). ``clock``: the
        calling task's (a test's).
        """
        if not self.delete_job(kind, name, namespace, uid=uid):
            return False
        deadline = clock.monotonic() + timeout
        while (job := self.get_job(kind, name, namespace)) is not None and (
            uid is None or job["metadata"].get("uid") == uid
        ):
            if clock.monotonic() > deadline:
                title = f"{get_job_kind(kind).kind} {namespace}/{name}"
                raise TrainingJobError(f"{title} still exists {timeout:.0f}s after its deletion")
            clock.sleep_sync(interval)
        return True

    @retry_transient()
    def get_training_runtime(self, runtime_kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """A TrainJob's runtime (``ClusterTrainingRuntime``, cluster-wide, or ``TrainingRuntime`` in
        ``namespace``), or None when it does not exist."""
        runtime = TRAINING_RUNTIME_KINDS[runtime_kind]
        where = f"{namespace}/{name}" if runtime.namespaced else name
        try:
            if runtime.namespaced:
                return self._custom.get_namespaced_custom_object(**runtime.namespaced_path(namespace), name=name)
            return self._custom.get_cluster_custom_object(**runtime.cluster_path(), name=name)
        except Exception as error:
            if api_status(error) == 404:
                return None
            raise_for_access(error, f"get {runtime_kind} {where}")
            raise

    @retry_transient()
    def list_job_pods(self, job_name: str, namespace: str, *, kind: str | JobKind) -> list[dict[str, Any]]:
        """The job's pods, found by the label the kind's operator sets (a TrainJob's: its JobSet's)."""
        label = get_job_kind(kind).pod_labels.job_name
        try:
            pods = self.core_v1_client.list_namespaced_pod(namespace, label_selector=f"{label}={job_name}")
        except Exception as error:
            raise_for_access(error, f"list pods of {namespace}/{job_name}")
            raise
        return [self._to_dict(pod) for pod in pods.items]

    @retry_transient()
    def read_pod_log(
        self,
        pod_name: str,
        namespace: str,
        container: str | None = None,
        *,
        tail_lines: int | None = None,
        limit_bytes: int | None = 1_000_000,
        previous: bool = False,
        timestamps: bool = False,
        since_time: str | None = None,
    ) -> str:
        """The pod's log ('' when the pod or its log is gone).

        ``previous``: the restarted container's last run; ``timestamps``: each line starts with its
        RFC 3339 time; ``since_time`` (RFC 3339, whole seconds): only lines written since.
        """
        try:
            if since_time is None:
                # The raw response: some kubernetes client versions turn a text/plain body into str(bytes).
                response = self.core_v1_client.read_namespaced_pod_log(
                    pod_name,
                    namespace,
                    container=container,
                    tail_lines=tail_lines,
                    limit_bytes=limit_bytes,
                    previous=previous,
                    timestamps=timestamps,
                    _preload_content=False,
                )
            else:
                response = self._read_pod_log_since(
                    pod_name,
                    namespace,
                    {
                        "container": container,
                        "tailLines": tail_lines,
                        "limitBytes": limit_bytes,
                        "previous": previous,
                        "timestamps": timestamps,
                        "sinceTime": since_time,
                    },
                )
        except Exception as error:
            if api_status(error) in (400, 404):
                return ""
            raise_for_access(error, f"read log of pod {namespace}/{pod_name}")
            raise
        return response.data.decode("utf-8", errors="replace")

    def _read_pod_log_since(self, pod_name: str, namespace: str, query: Mapping[str, Any]) -> Any:
        """The log request with ``sinceTime``, which the API has and ``read_namespaced_pod_log`` lacks:
        the same GET, through the same client's ``call_api``."""
        api_client = self.core_v1_client.api_client
        return api_client.call_api(
            "/api/v1/namespaces/{namespace}/pods/{name}/log",
            "GET",
            path_params={"namespace": namespace, "name": pod_name},
            query_params=[(key, value) for key, value in query.items() if value is not None],
            # What the generated method asks for (the API server answers 406 to a bare text/plain).
            header_params={"Accept": api_client.select_header_accept(_POD_LOG_ACCEPTS)},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
        )

    @retry_transient()
    def list_warning_events(self, namespace: str, object_names: set[str]) -> list[dict[str, Any]]:
        """Warning events about the named objects (the job and its pods), oldest first.

        The API server selects them (one request per object: a field selector has no "or"), so a
        namespace with thousands of events costs no more than one with a few.
        """
        selected: list[dict[str, Any]] = []
        for name in sorted(object_names):
            try:
                events = self.core_v1_client.list_namespaced_event(
                    namespace, field_selector=warning_events_selector(name)
                )
            except Exception as error:
                raise_for_access(error, f"list events of {namespace}/{name}")
                raise
            selected.extend(self._to_dict(event) for event in events.items)
        return sorted(selected, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))

    def worker_clusters_extra(self) -> Any:
        """The connection's extra ``worker_clusters`` as stored (a JSON object or its text; ``kueue.dispatch``)."""
        return self._get_field(WORKER_CLUSTERS)

    def worker_hook(self, conn_id: str) -> TrainingJobHook:
        """A hook on a MultiKueue worker cluster, through its own connection (kubeconfig, context)."""
        return TrainingJobHook(conn_id=conn_id)

    def trigger_connection(self) -> ClusterConnection:
        """How the trigger reaches the same cluster from the triggerer (see ``connection``).

        The connection id and context travel; the triggerer reads the connection itself. Only a kubeconfig
        file the worker reads (``config_file``, the connection's ``kube_config_path``) or a ``config_dict``
        given to the hook travels as content, cut to the one context this task uses, with the
        connection's other extras. Nothing else: a connection that names no kubeconfig is resolved by the
        triggerer's own default, never by shipping the worker's ``$KUBECONFIG``.
        """
        path = self.config_file or self._get_field("kube_config_path")
        if self.config_dict is None and not path:
            return ClusterConnection(conn_id=self.conn_id, cluster_context=self.cluster_context)
        full: Mapping[str, Any]
        if self.config_dict is not None:
            full = self.config_dict
        else:
            with open(path) as file:
                full = yaml.safe_load(file)
        context = self.cluster_context or self._get_field("cluster_context")
        try:
            kubeconfig, context = minimal_kubeconfig(full, context)
        except ValueError as error:
            raise TrainingJobError(f"{path or 'config_dict'}: {error}") from None  # never the file's content
        extras = {
            key: value
            for key, value in self.conn_extras.items()
            if key.removeprefix(_LEGACY_EXTRA_PREFIX) not in _KUBECONFIG_EXTRAS
        }
        return ClusterConnection(conn_id=self.conn_id, cluster_context=context, kubeconfig=kubeconfig, extras=extras)

    def collect_evidence(self, ref: JobRef, *, logger: Any = None) -> Evidence:
        """What the cluster shows about the job ``ref``: its pods, the Warning events about it and them, and
        its failing containers' last lines; which objects and logs are the failure modules' choice
        (``diagnostics.event_objects``, ``logs_to_read``), the judgement too (``failure_class.diagnose``)."""
        kind = get_job_kind(ref.kind)
        try:
            pods = self.list_job_pods(ref.name, ref.namespace, kind=kind)
            events = self.list_warning_events(ref.namespace, event_objects(kind, ref.name, pods))
            tails = {
                pod_name: self.read_pod_log(
                    pod_name, ref.namespace, container, tail_lines=LOG_TAIL_LINES, previous=previous
                )
                for pod_name, container, previous in logs_to_read(pods)
            }
        except Exception as error:  # The reason we already have beats no reason at all.
            (logger or self.log).warning("Could not collect diagnostics for %s: %r", ref.title, error)
            return Evidence()
        return Evidence(tuple(pods), tuple(events), tails)
