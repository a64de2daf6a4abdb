"""Saying why Kueue holds a job, from a worker (the sync wait and the sensor's poke), and checking a
LocalQueue before a job is submitted to it.

The triggerer follows Workloads through its shared watch (``triggers.training_job``); a worker that
polls anyway lists the job's Workload (``TrainingJobHook.find_workload``), and only while Kueue holds
the job, so jobs without a queue (and clusters without Kueue) cost no extra request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.hooks.api_errors import api_status, describe_error
from airflow_provider_disttrain.kueue import held_by_kueue, waiting_message
from airflow_provider_disttrain.kueue_admission import (
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    UNREADABLE,
    NeverAdmitted,
    never_admitted,
    queue_problem,
)

# 401/403: the Role lacks list on workloads.kueue.x-k8s.io; 404: Kueue's CRD is not installed.
_UNREADABLE = (401, 403, 404)


class KueueWaitReporter:
    """Kueue's reason a job waits, logged once per change; ``hook`` has ``find_workload``."""

    def __init__(self, hook: Any, log: Any) -> None:
        self._hook = hook
        self._log = log
        self._unreadable = False
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
        if message and message != self.message:
            self._log.info("%s is queued by Kueue: %s", title, message)
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
