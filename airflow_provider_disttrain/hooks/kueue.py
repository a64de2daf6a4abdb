"""Saying why Kueue holds a job, from a worker (the sync wait and the sensor's poke).

The triggerer follows Workloads through its shared watch (``triggers.training_job``); a worker that
polls anyway lists the job's Workload (``TrainingJobHook.find_workload``), and only while Kueue holds
the job, so jobs without a queue (and clusters without Kueue) cost no extra request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.hooks.api_errors import api_status, describe_error
from airflow_provider_disttrain.kueue import held_by_kueue, waiting_message

# 401/403: the Role lacks list on workloads.kueue.x-k8s.io; 404: Kueue's CRD is not installed.
_UNREADABLE = (401, 403, 404)


class KueueWaitReporter:
    """Kueue's reason a job waits, logged once per change; ``hook`` has ``find_workload``."""

    def __init__(self, hook: Any, log: Any) -> None:
        self._hook = hook
        self._log = log
        self._unreadable = False
        self.message: str | None = None

    def observe(self, job: Mapping[str, Any] | None) -> str | None:
        """Kueue's waiting message for ``job`` while Kueue holds it (logged when it changes), else None."""
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
        if message and message != self.message:
            self._log.info("%s is queued by Kueue: %s", title, message)
        self.message = message
        return message
