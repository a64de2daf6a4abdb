"""Saying why Kueue holds a job, from a worker (the sync wait and the sensor's poke), and checking a
LocalQueue before a job is submitted to it.

The triggerer follows Workloads through its shared watch (``triggers.training_job``); a worker that
polls anyway lists the job's Workload (``TrainingJobHook.find_workload``), and only while Kueue holds
the job, so jobs without a queue (and clusters without Kueue) cost no extra request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_disttrain.exceptions import JobInadmissibleError
from airflow_provider_disttrain.hooks.api_errors import api_status, describe_error
from airflow_provider_disttrain.kube.conditions import parse_time
from airflow_provider_disttrain.kueue.admission import (
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    UNREADABLE,
    NeverAdmitted,
    never_admitted,
    queue_problem,
)
from airflow_provider_disttrain.kueue.hold import held_by_kueue, is_admitted, queue_name, waiting_message
from airflow_provider_disttrain.kueue.position import MalformedAnswer, QueuePosition, positions

# 401/403: the Role lacks list on workloads.kueue.x-k8s.io; 404: Kueue's CRD is not installed.
_UNREADABLE = (401, 403, 404)
# 401/403: the Role lacks get on localqueues/pendingworkloads in visibility.kueue.x-k8s.io; 404: the API
# is not served (Kueue older than v0.9, VisibilityOnDemand off); 503: its APIService is registered but
# Kueue's visibility server does not answer.
VISIBILITY_UNAVAILABLE = (401, 403, 404, 503)
POSITION_REFRESH_SECONDS = 30.0
"""How often a LocalQueue's positions are asked for (at most; once for all the jobs waiting in it)."""


def waited_seconds(workload: Mapping[str, Any], now: float) -> float | None:
    """How long the Workload has been pending: since it was created (the job's submission)."""
    created = parse_time((workload.get("metadata") or {}).get("creationTimestamp"))
    return None if created is None else max(0.0, now - created.timestamp())


def visibility_unavailable_warning(namespace: str, local_queue: str, error: BaseException) -> str:
    return (
        f"Kueue's queue positions for LocalQueue {namespace}/{local_queue} cannot be read "
        f"({describe_error(error)}): the Role needs get on localqueues/pendingworkloads in "
        "visibility.kueue.x-k8s.io, and Kueue's visibility API must be served (VisibilityOnDemand); the task "
        "says why the job waits without its position"
    )


def malformed_answer_warning(namespace: str, local_queue: str, error: MalformedAnswer, refresh_seconds: float) -> str:
    return (
        f"Kueue's visibility API answered something that is not a PendingWorkloadsSummary for LocalQueue "
        f"{namespace}/{local_queue} ({error}): skipped; the last positions stay and it is asked again in "
        f"{refresh_seconds:.0f} s"
    )


class QueuePositionReader:
    """A worker's reads of its job's LocalQueue positions: one GET per ``refresh_seconds`` at most, and
    none after the API said it cannot answer (logged once). ``monotonic``: the clock (a test's)."""

    def __init__(
        self,
        hook: Any,
        log: Any,
        *,
        refresh_seconds: float = POSITION_REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._hook = hook
        self._log = log
        self._refresh_seconds = refresh_seconds
        self._monotonic = monotonic
        self._fetched_at: float | None = None
        self._positions: dict[str, QueuePosition] = {}
        self.unavailable = False
        self.malformed = False

    def position(self, namespace: str, local_queue: str, workload_name: str) -> QueuePosition | None:
        if self.unavailable:
            return None
        now = self._monotonic()
        if self._fetched_at is None or now - self._fetched_at >= self._refresh_seconds:
            self._fetched_at = now
            try:
                self._positions = positions(local_queue, self._hook.pending_workloads(namespace, local_queue))
                self.malformed = False
            except MalformedAnswer as error:  # skipped: the last positions stay, asked again next interval
                if not self.malformed:
                    warning = malformed_answer_warning(namespace, local_queue, error, self._refresh_seconds)
                    self._log.warning("%s", warning)
                self.malformed = True
            except Exception as error:
                if api_status(error) not in VISIBILITY_UNAVAILABLE:
                    raise
                self.unavailable = True
                self._log.warning("%s", visibility_unavailable_warning(namespace, local_queue, error))
                return None
        return self._positions.get(workload_name)


class KueueWaitReporter:
    """Kueue's reason a job waits, logged once per change; ``hook`` has ``find_workload``."""

    def __init__(
        self,
        hook: Any,
        log: Any,
        *,
        positions: QueuePositionReader | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._hook = hook
        self._log = log
        self._unreadable = False
        self._positions = positions or QueuePositionReader(hook, log)
        self._wall = wall
        self._said: tuple[str, int | None, int | None] | None = None
        self.message: str | None = None
        self.never_admitted: NeverAdmitted | None = None
        """Kueue's word that it can never admit the job (``kueue_admission``), from the last observation."""

    def observe(self, job: Mapping[str, Any] | None) -> str | None:
        """Kueue's waiting message for ``job`` while Kueue holds it (logged when it changes), else None."""
        self.never_admitted = None
        if job is None or not held_by_kueue(job) or self._unreadable:
            self.message = None
            return None
        metadata = job.get("metadata") or {}
        title = f"{job.get('kind')} {metadata.get('namespace')}/{metadata.get('name')}"
        try:
            workload = self._hook.find_workload(metadata["namespace"], metadata["uid"])
        except Exception as error:
            if api_status(error) not in _UNREADABLE:
                raise
            self._unreadable = True
            self._log.warning(
                "%s is queued by Kueue, but its Workload cannot be read (%s): the Role needs list and watch "
                "on workloads.kueue.x-k8s.io to say why it waits",
                title,
                describe_error(error),
            )
            return None
        message = waiting_message(workload)
        self.never_admitted = never_admitted(workload)
        position = None
        if message and workload is not None and not is_admitted(workload) and self.never_admitted is None:
            position = self._positions.position(
                metadata["namespace"], str(queue_name(job)), str((workload.get("metadata") or {}).get("name"))
            )
        if message and position is not None and workload is not None:
            created = (workload.get("metadata") or {}).get("creationTimestamp")
            message = (
                f"{message}; {position.describe(since=created, waited_seconds=waited_seconds(workload, self._wall()))}"
            )
        # Logged when Kueue's word or the position changes, not each time the waited time grows.
        at = (position.in_local_queue, position.cluster_queue_position) if position is not None else (None, None)
        said = (waiting_message(workload) or "", *at)
        if message and said != self._said:
            self._log.info("%s is queued by Kueue: %s", title, message)
        self._said = said if message else None
        self.message = message
        return message


def check_local_queue(hook: Any, namespace: str, name: str, log: Any) -> str | None:
    """Why LocalQueue ``namespace/name`` can admit no job, in Kueue's words, or None (it may, or it cannot
    be told): one GET of the LocalQueue, and one of its ClusterQueue when the connection may read it.

    A LocalQueue that cannot be read (403: the Role lacks ``get`` on ``localqueues``; 404 naming no
    object: Kueue is not installed) is not judged: the job is submitted as without the check, and the
    log says so once. A ClusterQueue that cannot be read (a namespaced Role cannot grant it: see
    ``deploy/rbac/clusterrole.yaml``) leaves the LocalQueue's own ``Active`` condition to judge.
    """
    try:
        local_queue = hook.get_kueue_queue(LOCAL_QUEUE, name, namespace)
    except Exception as error:
        if api_status(error) not in _UNREADABLE:
            raise
        log.warning(
            "LocalQueue %s/%s was not checked before submitting (%s): the Role needs get on "
            "localqueues.kueue.x-k8s.io to refuse a queue that cannot admit the job at once",
            namespace,
            name,
            describe_error(error),
        )
        return None
    cluster_queue: Mapping[str, Any] | None = UNREADABLE
    if local_queue is not None and (cq_name := (local_queue.get("spec") or {}).get("clusterQueue")):
        try:
            cluster_queue = hook.get_kueue_queue(CLUSTER_QUEUE, str(cq_name))
        except Exception as error:
            if api_status(error) not in _UNREADABLE:
                raise
            log.debug("ClusterQueue %s not readable (%s): judging LocalQueue %s alone", cq_name, error, name)
    return queue_problem(namespace, name, local_queue, cluster_queue)


def refuse_a_queue_that_admits_nothing(hook: Any, kind: str, manifest: Mapping[str, Any], log: Any) -> None:
    """Raise ``JobInadmissibleError`` before anything is created when the manifest's LocalQueue can admit
    nothing (missing, or it or its ClusterQueue stopped or inactive): waiting would only end at
    ``queue_timeout``. A manifest without a queue, or a queue that may admit it, passes."""
    if (queue := queue_name(manifest)) is None:
        return
    namespace = manifest["metadata"]["namespace"]
    if problem := check_local_queue(hook, namespace, queue, log):
        raise JobInadmissibleError(
            f"{kind} {namespace}/{manifest['metadata']['name']} was not submitted: Kueue could never "
            f"admit it ({problem})"
        )
