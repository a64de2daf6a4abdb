"""Asynchronous Kubernetes I/O for the triggerer, on top of the cncf provider's ``AsyncKubernetesHook``.

``AsyncJobClient`` holds the single-object calls (get, delete) bound to an API client: the shared
watch's client for a trigger's reads (``hooks.shared_watch``), a short-lived one for ``on_kill``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from kubernetes_asyncio import client as async_client

from airflow_provider_disttrain.hooks.api_errors import delete_body, means_job_absent, retry_transient
from airflow_provider_disttrain.kinds import JobKind


class AsyncJobClient:
    """The calls a trigger makes, bound to one API client."""

    def __init__(self, api_client: Any) -> None:
        self._custom = async_client.CustomObjectsApi(api_client)

    @retry_transient(attempts=3)
    async def get_job(self, kind: JobKind, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return await self._custom.get_namespaced_custom_object(
                group=kind.group, version=kind.version, namespace=namespace, plural=kind.plural, name=name
            )
        except Exception as error:
            if means_job_absent(error):
                return None
            raise

    @retry_transient(attempts=3)
    async def delete_job(self, kind: JobKind, name: str, namespace: str, uid: str | None = None) -> bool:
        try:
            await self._custom.delete_namespaced_custom_object(
                group=kind.group,
                version=kind.version,
                namespace=namespace,
                plural=kind.plural,
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

    @contextlib.asynccontextmanager
    async def job_client(self) -> AsyncIterator[AsyncJobClient]:
        async with self.get_conn() as api_client:
            yield AsyncJobClient(api_client)
