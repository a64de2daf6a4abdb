"""Saying why Kueue holds a job, from a worker (the sync wait and the sensor's poke), and checking a
LocalQueue before a job is submitted to it.

The triggerer follows Workloads through its shared watch (``triggers.training_job``); a worker that
polls anyway lists the job's Workload (``TrainingJobHook.find_workload``), and only while Kueue holds
the job, so jobs without a queue (and clusters without Kueue) cost no extra request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.exceptions import JobInadmissibleError
from airflow_provider_disttrain.hooks.api_errors import api_status, describe_error
from airflow_provider_disttrain.kueue.admission import (
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    UNREADABLE,
    NeverAdmitted,
    queue_problem,
)
from airflow_provider_disttrain.kueue.estimate import AdmissionLog, WaitEstimate
from airflow_provider_disttrain.kueue.hold import held_by_kueue, queue_name
from airflow_provider_disttrain.kueue.position import QueuePosition
from airflow_provider_disttrain.kueue.waiting import (
    NOTHING,
    POSITION_REFRESH_SECONDS,
    WORKLOAD_UNREADABLE,
    KueueWord,
    PositionBook,
    kueue_word,
    position_wanted,
    waited_seconds,
    workload_unreadable_warning,
)
from airflow_provider_disttrain.utils.clock import SYSTEM, Clock


class QueuePositionReader:
    """A worker's reads of its job's LocalQueue positions: one GET per ``refresh_seconds`` at most, and
    none after the API said it cannot answer (logged once). What an answer means is ``PositionBook``'s;
    this only asks (and raises an outage, for the waiter's own retry handling).

    With each GET it LISTs the namespace's Workloads too, for the admission history the start is
    estimated from (``kueue.estimate``): one LIST per ``refresh_seconds``, not per poll."""

    def __init__(
        self,
        hook: Any,
        log: Any,
        *,
        refresh_seconds: float = POSITION_REFRESH_SECONDS,
        clock: Clock = SYSTEM,
    ) -> None:
        self._hook = hook
        self._log = log
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._book: PositionBook | None = None  # one job's: its LocalQueue's
        self.admissions = AdmissionLog()
        self._history_unreadable = False

    @property
    def unavailable(self) -> bool:
        return self._book is not None and self._book.unavailable

    def position(self, namespace: str, local_queue: str, workload_name: str) -> QueuePosition | None:
        book = self._book
        if book is None or (book.namespace, book.local_queue) != (namespace, local_queue):
            book = self._book = PositionBook(namespace, local_queue, self._refresh_seconds)
        now = self._clock.monotonic()
        if book.due(now):
            book.asking(now)
            self._read_history(namespace)
            try:
                summary = self._hook.pending_workloads(namespace, local_queue)
            except Exception as error:
                if (warning := book.failed(api_status(error), describe_error(error))) is None:
                    raise
                self._log.warning("%s", warning)
            else:
                if (warning := book.answered(summary)[1]) is not None:
                    self._log.warning("%s", warning)
        return None if book.unavailable else book.positions.get(workload_name)

    def estimate(self, local_queue: str, position: QueuePosition | None) -> WaitEstimate:
        """When the job at ``position`` may start, from the admissions the last LISTs showed."""
        return self.admissions.estimate(local_queue, position, self._clock.wall())

    def _read_history(self, namespace: str) -> None:
        if self._history_unreadable:
            return
        try:
            workloads = self._hook.list_workloads(namespace)
        except Exception as error:
            if api_status(error) not in WORKLOAD_UNREADABLE:
                raise
            # find_workload reads them with the same verb: a Role that allows one allows both.
            self._history_unreadable = True
            self._log.debug("Workloads of %s not listed for the admission history: %s", namespace, error)
            return
        self.admissions.see_all(workloads)


class KueueWaitReporter:
    """Kueue's reason a job waits, logged once per change; ``hook`` has ``find_workload``. What the
    Workload says is ``kueue_word``'s; this reads it with the hook and logs."""

    def __init__(
        self,
        hook: Any,
        log: Any,
        *,
        positions: QueuePositionReader | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self._hook = hook
        self._log = log
        self._unreadable = False
        self._positions = positions or QueuePositionReader(hook, log, clock=clock)
        self._clock = clock
        self._said: tuple[str, int | None, int | None] | None = None
        self.message: str | None = None
        self.never_admitted: NeverAdmitted | None = None
        """Kueue's word that it can never admit the job (``kueue_admission``), from the last observation."""

    def observe(self, job: Mapping[str, Any] | None) -> str | None:
        """Kueue's waiting message for ``job`` while Kueue holds it (logged when it changes), else None."""
        word = self._word(job)
        # Logged when Kueue's word or the position changes, not each time the waited time grows.
        if word.message and word.said != self._said:
            self._log.info("%s is queued by Kueue: %s", _title(job or {}), word.message)
        self._said, self.message, self.never_admitted = word.said, word.message, word.never_admitted
        return word.message

    def _word(self, job: Mapping[str, Any] | None) -> KueueWord:
        if job is None or not held_by_kueue(job) or self._unreadable:
            return NOTHING
        metadata = job.get("metadata") or {}
        try:
            workload = self._hook.find_workload(metadata["namespace"], metadata["uid"])
        except Exception as error:
            if api_status(error) not in WORKLOAD_UNREADABLE:
                raise
            self._unreadable = True
            self._log.warning("%s", workload_unreadable_warning(_title(job), describe_error(error)))
            return NOTHING
        position = wait = None
        if workload is not None and (name := position_wanted(workload)) is not None:
            position = self._positions.position(metadata["namespace"], str(queue_name(job)), name)
            if not self._positions.unavailable:
                wait = self._positions.estimate(str(queue_name(job)), position)
        waited = waited_seconds(workload, self._clock.wall()) if workload is not None else None
        return kueue_word(workload, position, waited=waited, wait=wait)


def _title(job: Mapping[str, Any]) -> str:
    metadata = job.get("metadata") or {}
    return f"{job.get('kind')} {metadata.get('namespace')}/{metadata.get('name')}"


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
        if api_status(error) not in WORKLOAD_UNREADABLE:
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
            if api_status(error) not in WORKLOAD_UNREADABLE:
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
