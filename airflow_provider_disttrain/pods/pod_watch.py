"""Watching one job's pods into a ``PodSnapshot`` while it runs: a thread (sync wait) or a task (trigger).

Why: MultiKueue deletes a dispatched job's pods on the worker cluster before the manager's job turns
terminal (``pods.snapshot``), so what the task's ending reads from them has to be caught as it happens.
Both drivers watch the pods of the kind's pod label selector (``JobKind.pod_labels.job_name``) from
the start (a watch without a resourceVersion sends every existing pod as ADDED first), resume from the
last event's resourceVersion when the server ends a watch at ``timeoutSeconds``, relist (watch from the
start again) on 410 Gone, and back off on other failures as the shared watch does (``shared_watch``:
doubling from ``MIN_BACKOFF_SECONDS``, capped, with jitter). Every request has a client-side timeout.
What they keep is a courtesy for the ending: a failure never ends the wait; it is logged at debug.

The sync driver is ``kubernetes.watch.Watch`` in a daemon thread (the poll loop sleeps between polls,
and a watch must stay open across them); the async one reads the watch's JSON lines through a borrowed,
shared client of the worker cluster (``WatchRegistry.borrow``), as the shared watch does, so a triggerer
holds no client per job.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.hooks.faults import Action, classify
from airflow_provider_disttrain.pods.snapshot import PodSnapshot
from airflow_provider_disttrain.utils.timeouts import next_line

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.cluster_client import ClusterClient
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.job.kinds import JobKind

log = logging.getLogger(__name__)

WATCH_SECONDS = 60
"""Each watch request's ``timeoutSeconds``: the server ends it then, and the driver resumes."""
CLIENT_TIMEOUT_MARGIN_SECONDS = 30.0
"""Beyond ``WATCH_SECONDS``, how long the client waits on a silent watch before it gives it up."""
MIN_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
HEALTHY_WATCH_SECONDS = 5.0
"""A watch the server ended sooner than this counts as a failure for the backoff: else a server (or proxy)
that ends every watch at once would be asked again in a hot loop."""


def backoff(failures: int) -> float:
    """Seconds before the next try after ``failures`` failures in a row (the shared watch's rule)."""
    return min(MAX_BACKOFF_SECONDS, MIN_BACKOFF_SECONDS * 2 ** min(failures, 8)) * random.uniform(0.5, 1.0)


def pod_selector(kind: JobKind, name: str) -> str:
    """The label selector of the job's pods (the one ``TrainingJobHook.list_job_pods`` lists with)."""
    return f"{kind.pod_labels.job_name}={name}"


class _Watched:
    """A snapshot shared between the driver that feeds it and the reader: guarded by a lock."""

    def __init__(self) -> None:
        self.snapshot = PodSnapshot()
        self.resource_version: str | None = None
        self._lock = threading.Lock()
        self._said_overflow = False
        self._said_denied = False

    def apply(self, event: Mapping[str, Any], title: str) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":  # an in-stream Status: 410 Gone when the version is too old
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=obj.get("code") or 500, reason=f"{obj.get('reason')}: {obj.get('message')}")
        if version := (obj.get("metadata") or {}).get("resourceVersion"):
            self.resource_version = version
        with self._lock:
            self.snapshot.apply(str(event.get("type")), obj)
        if self.snapshot.overflowed and not self._said_overflow:
            self._said_overflow = True
            log.warning("%s: more than %d pods; the later ones are not kept", title, self.snapshot.max_pods)

    def failed(self, error: BaseException, title: str) -> None:
        """After a broken watch: a 410 (or any relist fault) watches from the start again; a 403 is said
        once (a Role without ``watch`` on pods: the ending then reads only what the cluster still lists)."""
        action = classify(error).action
        if action is Action.RELIST:
            self.resource_version = None
        elif action is Action.DENIED and not self._said_denied:
            self._said_denied = True
            log.warning(
                "Cannot watch the pods of %s (%r): the connection's Role needs 'watch' on pods to keep their last "
                "states, which a MultiKueue worker deletes before the job ends",
                title,
                error,
            )

    def pods(self) -> list[dict[str, Any]]:
        with self._lock:
            return self.snapshot.pods()


def _undeserialized(list_pods: Callable[..., Any]) -> Callable[..., Any]:
    """``list_pods`` without its docstring: ``kubernetes.watch.Watch`` builds its return type's models (V1Pod)
    from the ``:return:``/``:rtype:`` line it reads there, which this watch never uses (it keeps the raw
    objects), and which some client versions (32.x) refuse for a pod missing a field they require."""

    def list_namespaced_pod(*args: Any, **kwargs: Any) -> Any:
        return list_pods(*args, **kwargs)

    return list_namespaced_pod


class PodWatchThread:
    """Keeps the latest state of the job's pods on ``hook``'s cluster from ``start`` until ``stop``."""

    def __init__(self, hook: TrainingJobHook, kind: JobKind, name: str, namespace: str, title: str) -> None:
        self.hook, self.namespace, self.title = hook, namespace, title
        self.selector = pod_selector(kind, name)
        self._watched = _Watched()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"disttrain-pods-{namespace}/{name}", daemon=True)

    def start(self) -> PodWatchThread:
        self._thread.start()
        return self

    def stop(self) -> list[dict[str, Any]]:
        """Stop watching (the daemon thread ends with its request, at the latest) and return what it kept."""
        self._stopped.set()
        return self._watched.pods()

    def pods(self) -> list[dict[str, Any]]:
        return self._watched.pods()

    def _run(self) -> None:
        from kubernetes import watch

        failures = 0
        while not self._stopped.is_set():
            started, stream = time.monotonic(), watch.Watch()
            options: dict[str, Any] = {
                "label_selector": self.selector,
                "timeout_seconds": WATCH_SECONDS,
                "_request_timeout": WATCH_SECONDS + CLIENT_TIMEOUT_MARGIN_SECONDS,
            }
            if self._watched.resource_version:
                options["resource_version"] = self._watched.resource_version
            try:
                for event in stream.stream(
                    _undeserialized(self.hook.core_v1_client.list_namespaced_pod), self.namespace, **options
                ):
                    self._watched.apply({"type": event.get("type"), "object": event.get("raw_object")}, self.title)
                    if self._stopped.is_set():
                        stream.stop()
            except Exception as error:
                self._watched.failed(error, self.title)
                log.debug("Watching the pods of %s failed (%r); again in a moment", self.title, error)
            failures = 0 if time.monotonic() - started >= HEALTHY_WATCH_SECONDS else failures + 1
            if failures:
                self._stopped.wait(backoff(failures))


class PodWatchTask:
    """The trigger's watch of the job's pods through a borrowed shared client of their cluster."""

    def __init__(self, kind: JobKind, name: str, namespace: str, title: str) -> None:
        self.namespace, self.title = namespace, title
        self.selector = pod_selector(kind, name)
        self._watched = _Watched()

    def pods(self) -> list[dict[str, Any]]:
        return self._watched.pods()

    async def run(self, cluster: ClusterClient) -> None:
        """Watch until cancelled."""
        failures, loop = 0, asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self._watch_once(cluster)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._watched.failed(error, self.title)
                log.debug("Watching the pods of %s failed (%r); again in a moment", self.title, error)
            failures = 0 if loop.time() - started >= HEALTHY_WATCH_SECONDS else failures + 1
            if failures:
                await asyncio.sleep(backoff(failures))

    async def _watch_once(self, cluster: ClusterClient) -> None:
        from kubernetes_asyncio import client as async_client

        from airflow_provider_disttrain.hooks.async_training_job import raise_for_status

        timeout = WATCH_SECONDS + CLIENT_TIMEOUT_MARGIN_SECONDS
        async with cluster.lease() as (api, _):
            options: dict[str, Any] = {
                "watch": True,
                "label_selector": self.selector,
                "timeout_seconds": WATCH_SECONDS,
                "_preload_content": False,
                "_request_timeout": timeout,
            }
            if self._watched.resource_version:
                options["resource_version"] = self._watched.resource_version
            response: Any = await async_client.CoreV1Api(api).list_namespaced_pod(self.namespace, **options)
            try:
                await raise_for_status(response)
                while line := await next_line(response.content, timeout):
                    if line.strip():
                        self._watched.apply(json.loads(line), self.title)
            finally:
                response.release()
