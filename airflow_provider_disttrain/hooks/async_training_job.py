"""Asynchronous Kubernetes I/O for the triggerer, on top of the cncf provider's ``AsyncKubernetesHook``.

``AsyncJobClient`` holds the calls a trigger makes besides the shared watch, bound to an API client:
the shared watch's client for a trigger's reads (``hooks.shared_watch``) and its log follower's pod
list, log stream and position patch (``live_logs``), a short-lived one for ``on_kill``. Transient
failures are retried with the hooks' shared policy (``api_errors.retry_transient``); a log stream is
not (its follower resumes from where it stopped).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_provider_disttrain.failures.controller_refusal import warning_events_selector
from airflow_provider_disttrain.hooks.api_errors import delete_body, means_job_absent, retry_transient
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, WORKLOAD, workload_of


async def raise_for_status(response: Any) -> None:
    """Without ``_preload_content`` the client returns any answer; turn a refusal into its exception."""
    if 200 <= response.status < 300:
        return
    body = await response.text()
    response.release()
    error = ApiException(status=response.status, reason=response.reason)
    error.body = body
    raise error


# What the generated log method asks for (the API server answers 406 to a bare text/plain).
POD_LOG_ACCEPTS = ["text/plain", "application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]
# The generated client would send a dict as a JSON patch (its first content type); this is a merge patch.
_MERGE_PATCH: dict[str, Any] = {"_content_type": "application/merge-patch+json"}


class AsyncJobClient:
    """The calls a trigger makes, bound to one API client."""

    def __init__(self, api_client: Any) -> None:
        self._api = api_client
        self._custom = async_client.CustomObjectsApi(api_client)
        self._core = async_client.CoreV1Api(api_client)

    @retry_transient(attempts=3)
    async def list_job_pods(self, kind: JobKind, name: str, namespace: str) -> list[dict[str, Any]]:
        """The job's pods (by the kind's job-name label) as the API server wrote them (no models built)."""
        listing: Any = await self._core.list_namespaced_pod(
            namespace, label_selector=f"{kind.pod_labels.job_name}={name}", _preload_content=False
        )
        async with listing:
            await raise_for_status(listing)
            return list((await listing.json()).get("items") or [])

    @retry_transient(attempts=3)
    async def list_warning_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The Warning events about the object ``name``, selected by the API server (as the sync hook's)."""
        listing: Any = await self._core.list_namespaced_event(
            namespace, field_selector=warning_events_selector(name), _preload_content=False
        )
        async with listing:
            await raise_for_status(listing)
            return list((await listing.json()).get("items") or [])

    async def stream_pod_log(self, pod: str, namespace: str, *, since_time: str | None = None, **options: Any) -> Any:
        """The raw response of a pod's log request (``follow``, ``timestamps``, ``since_time``...):
        read its ``content`` and ``release()`` it. Open while the container runs and a training may
        print nothing for long: no total or read timeout (the cncf client puts 60 s on a request
        given none)."""
        import aiohttp

        stream_timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=None)
        if since_time is None:
            response = await self._core.read_namespaced_pod_log(
                pod, namespace, _preload_content=False, _request_timeout=stream_timeout, **options
            )
        else:
            # ``sinceTime``, which the API has and the generated method lacks: the same GET through the
            # same client's ``call_api`` (as the sync hook's ``_read_pod_log_since``).
            if unknown := set(options) - {"container", "follow", "timestamps"}:  # named alike in the query
                raise TypeError(f"stream_pod_log with since_time takes no {sorted(unknown)}")
            query = [(key, value) for key, value in options.items() if value is not None]
            api_client = self._api
            response = await api_client.call_api(
                "/api/v1/namespaces/{namespace}/pods/{name}/log",
                "GET",
                path_params={"namespace": namespace, "name": pod},
                query_params=[*query, ("sinceTime", since_time)],
                header_params={"Accept": api_client.select_header_accept(POD_LOG_ACCEPTS)},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _preload_content=False,
                _request_timeout=stream_timeout,
            )
        await raise_for_status(response)
        return response

    @retry_transient(attempts=3)
    async def find_workload(self, namespace: str, job_uid: str) -> dict[str, Any] | None:
        """The Kueue Workload standing for the job of ``job_uid`` (by Kueue's job-uid label), as the sync
        hook's ``find_workload``; None when there is none."""
        listing: Any = await self._custom.list_namespaced_custom_object(
            **WORKLOAD.namespaced_path(namespace), label_selector=f"{JOB_UID_LABEL}={job_uid}"
        )
        workload = workload_of(listing.get("items") or [], job_uid)
        return dict(workload) if workload is not None else None

    @retry_transient(attempts=3)
    async def merge_patch_job(self, kind: JobKind, name: str, namespace: str, patch: dict[str, Any]) -> None:
        """A JSON merge patch of the job (the generated client would send a dict as a JSON patch)."""
        await self._custom.patch_namespaced_custom_object(
            **kind.resource.namespaced_path(namespace), name=name, body=patch, **_MERGE_PATCH
        )

    @retry_transient(attempts=3)
    async def get_job(self, kind: JobKind, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return await self._custom.get_namespaced_custom_object(
                **kind.resource.namespaced_path(namespace), name=name
            )
        except Exception as error:
            if means_job_absent(error):
                return None
            raise

    @retry_transient(attempts=3)
    async def delete_job(self, kind: JobKind, name: str, namespace: str, uid: str | None = None) -> bool:
        try:
            await self._custom.delete_namespaced_custom_object(
                **kind.resource.namespaced_path(namespace),
                name=name,
                body=delete_body(uid),  # type: ignore[arg-type]  # the client sends a dict as it is
            )
            return True
        except Exception as error:
            if means_job_absent(error, uid_precondition=bool(uid)):
                return False
            raise


class AsyncTrainingJobHook(AsyncKubernetesHook):
    """Connection handling from the cncf provider; job calls through ``job_client()``."""

    hook_name = "Kubeflow Training Job (async)"

    @classmethod
    def for_connection(cls, connection: ClusterConnection) -> AsyncTrainingJobHook:
        """The hook for ``connection`` (it reads the Airflow connection when nothing travelled)."""
        return cls(
            conn_id=connection.conn_id,
            cluster_context=connection.cluster_context,
            config_dict=dict(connection.kubeconfig) if connection.kubeconfig is not None else None,
            connection_extras=dict(connection.extras) if connection.extras is not None else None,
        )

    @contextlib.asynccontextmanager
    async def job_client(self) -> AsyncIterator[AsyncJobClient]:
        async with self.get_conn() as api_client:
            yield AsyncJobClient(api_client)
