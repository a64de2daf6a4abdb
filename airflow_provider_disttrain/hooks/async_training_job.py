"""Asynchronous Kubernetes I/O for the trigger, on top of the cncf provider's ``AsyncKubernetesHook``.

A trigger opens one ``AsyncJobClient`` for its whole life (one aiohttp session), instead of building
a client on every poll: hundreds of deferred training tasks share one triggerer.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio import watch as async_watch

from airflow_provider_disttrain.hooks.api_errors import api_status, delete_body, retry_transient
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
            if api_status(error) == 404:
                return None
            raise

    async def watch_job(
        self,
        kind: JobKind,
        name: str,
        namespace: str,
        *,
        resource_version: str | None,
        timeout_seconds: int,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """``(event type, job)`` pairs for this one job until the server ends the watch.

        Raises the client's ``ApiException`` with status 410 when ``resource_version`` is too old.
        """
        watcher = async_watch.Watch()
        kwargs: dict[str, Any] = {
            "field_selector": f"metadata.name={name}",
            "timeout_seconds": timeout_seconds,
            "allow_watch_bookmarks": True,
        }
        if resource_version:
            kwargs["resource_version"] = resource_version
        async with watcher.stream(
            self._custom.list_namespaced_custom_object,
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            **kwargs,
        ) as stream:
            async for event in stream:
                yield str(event["type"]), event.get("raw_object") or event["object"]

    @retry_transient(attempts=3)
    async def delete_job(self, kind: JobKind, name: str, namespace: str, uid: str | None = None) -> bool:
        try:
            await self._custom.delete_namespaced_custom_object(
                group=kind.group,
                version=kind.version,
                namespace=namespace,
                plural=kind.plural,
                name=name,
                body=delete_body(uid),
            )
            return True
        except Exception as error:
            if api_status(error) in (404, 409):
                return False
            raise


class AsyncTrainingJobHook(AsyncKubernetesHook):
    """Connection handling from the cncf provider; job calls through ``job_client()``."""

    hook_name = "Kubeflow Training Job (async)"

    @contextlib.asynccontextmanager
    async def job_client(self) -> AsyncIterator[AsyncJobClient]:
        async with self.get_conn() as api_client:
            yield AsyncJobClient(api_client)
