"""The trigger that watches one training job from the triggerer.

It watches the single object (field selector on its name), resumes from the last resourceVersion,
relists on 410 Gone, and falls back to polling when the watch is refused or keeps breaking. It never
raises out of ``run()``: every outcome is one event, ``{"status": "success" | "failed" | "timeout" |
"error", ...}``, carrying the job's summary and a message. Deadlines are absolute epoch seconds, so a
trigger that is moved to another triggerer keeps the same ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_disttrain.hooks.api_errors import api_status, describe_error, is_transient
from airflow_provider_disttrain.kinds import JobKind, get_job_kind
from airflow_provider_disttrain.outcome import ERROR, JobRef, check_job, make_outcome, seconds_to_deadline
from airflow_provider_disttrain.status import JobState, job_state

_WATCH_FAILURES_BEFORE_POLLING = 3
_POLLS_BEFORE_RETRYING_WATCH = 30
_ACCESS_DENIED_GRACE_SECONDS = 30.0
_KILL_TIMEOUT_SECONDS = 30


class TrainingJobTrigger(BaseTrigger):
    """Fire once when the job succeeds, fails, misses a deadline, or can no longer be watched.

    :param kind: job kind from the kinds table, e.g. ``PyTorchJob``.
    :param name: job name.
    :param namespace: job namespace.
    :param uid: the job's uid; a job recreated under the same name is reported, not followed.
    :param kubernetes_conn_id: the ``kubernetes`` connection.
    :param cluster_context: kubeconfig context to use.
    :param config_dict: kubeconfig content, shipped when the task used a file the triggerer may lack.
    :param connection_extras: the connection's extras, shipped together with ``config_dict``.
    :param startup_deadline: epoch seconds by which the job must have left the queued state.
    :param execution_deadline: epoch seconds by which the job must have finished.
    :param poll_interval: seconds between reads when polling, and the base of the error backoff.
    :param watch_timeout: seconds one watch request stays open before it is renewed.
    :param api_failure_tolerance: seconds of continuous API failure before giving up with an error.
    :param delete_on_kill: delete the job when a user kills the deferred task.
    """

    def __init__(
        self,
        *,
        kind: str,
        name: str,
        namespace: str,
        uid: str | None = None,
        kubernetes_conn_id: str | None = None,
        cluster_context: str | None = None,
        config_dict: dict[str, Any] | None = None,
        connection_extras: dict[str, Any] | None = None,
        startup_deadline: float | None = None,
        execution_deadline: float | None = None,
        poll_interval: float = 10.0,
        watch_timeout: int = 300,
        api_failure_tolerance: float = 300.0,
        delete_on_kill: bool = True,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.uid = uid
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = cluster_context
        self.config_dict = config_dict
        self.connection_extras = connection_extras
        self.startup_deadline = startup_deadline
        self.execution_deadline = execution_deadline
        self.poll_interval = poll_interval
        self.watch_timeout = watch_timeout
        self.api_failure_tolerance = api_failure_tolerance
        self.delete_on_kill = delete_on_kill

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "kind": self.kind,
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "cluster_context": self.cluster_context,
                "config_dict": self.config_dict,
                "connection_extras": self.connection_extras,
                "startup_deadline": self.startup_deadline,
                "execution_deadline": self.execution_deadline,
                "poll_interval": self.poll_interval,
                "watch_timeout": self.watch_timeout,
                "api_failure_tolerance": self.api_failure_tolerance,
                "delete_on_kill": self.delete_on_kill,
            },
        )

    @property
    def ref(self) -> JobRef:
        return JobRef(self.kind, self.name, self.namespace, self.uid)

    def _hook(self) -> Any:
        # Imported here so that loading the trigger class (the UI does) does not import kubernetes_asyncio.
        from airflow_provider_disttrain.hooks.async_training_job import AsyncTrainingJobHook

        return AsyncTrainingJobHook(
            conn_id=self.kubernetes_conn_id,
            cluster_context=self.cluster_context,
            config_dict=self.config_dict,
            connection_extras=self.connection_extras,
        )

    def _check(self, job: dict[str, Any] | None) -> dict[str, Any] | None:
        return check_job(
            self.ref,
            job,
            now=time.time(),
            startup_deadline=self.startup_deadline,
            execution_deadline=self.execution_deadline,
        )

    def _remaining(self, state: JobState | None) -> float | None:
        return seconds_to_deadline(
            state,
            now=time.time(),
            startup_deadline=self.startup_deadline,
            execution_deadline=self.execution_deadline,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            outcome = await self._watch_until_done()
        except Exception as error:  # The triggerer must always get an event, never a traceback.
            self.log.exception("Watching %s failed", self.ref.title)
            outcome = make_outcome(self.ref, ERROR, f"watching {self.ref.title} failed: {error!r}")
        yield TriggerEvent(outcome)

    async def _watch_until_done(self) -> dict[str, Any]:
        kind = get_job_kind(self.kind)
        resource_version: str | None = None
        job: dict[str, Any] | None = None
        watch_failures = 0  # watch requests that broke since the last one that ended normally
        errors = 0  # failed requests in a row, for the backoff
        failing_since: float | None = None
        polls = 0  # reads since falling back to polling
        seen_job = False  # the credentials have worked at least once
        denied_since: float | None = None
        async with self._hook().job_client() as jobs:
            while True:
                watching = False
                try:
                    job = await jobs.get_job(kind, self.name, self.namespace)
                    seen_job = True
                    failing_since = None
                    errors = 0
                    if outcome := self._check(job):
                        return outcome
                    assert job is not None  # _check returned an outcome for a missing job
                    resource_version = (job.get("metadata") or {}).get("resourceVersion")
                    if watch_failures >= _WATCH_FAILURES_BEFORE_POLLING:
                        await self._sleep(self.poll_interval, job_state(job))
                        polls += 1
                        denied_since = None
                        if polls >= _POLLS_BEFORE_RETRYING_WATCH:  # the proxy or server may be fixed by now
                            watch_failures = polls = 0
                        continue
                    watching = True
                    outcome = await self._follow_watch(jobs, kind, resource_version, job_state(job))
                    if outcome:
                        return outcome
                    watch_failures = 0
                    denied_since = None
                except Exception as error:
                    status = api_status(error)
                    if status == 410:
                        # The resourceVersion is too old: relist (the get at the loop's top) and rewatch.
                        resource_version = None
                        continue
                    if status in (401, 403):
                        # Refused after it was allowed: an API server that just restarted answers 403
                        # until its RBAC caches sync, so that gets a short grace; a first refusal is final.
                        denied_since = denied_since or time.time()
                        if seen_job and time.time() - denied_since < _ACCESS_DENIED_GRACE_SECONDS:
                            self.log.warning("Watching %s: %s; retrying", self.ref.title, describe_error(error))
                            await asyncio.sleep(1)
                            continue
                        return make_outcome(
                            self.ref,
                            ERROR,
                            f"the API server refused access to {self.ref.title} ({status} "
                            f"{getattr(error, 'reason', '') or error}); check the connection's RBAC Role",
                            job,
                        )
                    if not is_transient(error):
                        # Not an outage (a 404 of the resource type, a malformed reply): retrying won't help.
                        return make_outcome(
                            self.ref, ERROR, f"watching {self.ref.title} failed: {describe_error(error)}", job
                        )
                    now = time.time()
                    failing_since = failing_since or now
                    errors += 1
                    if watching:  # only a broken watch counts towards polling, not a failed read
                        watch_failures += 1
                    if now - failing_since >= self.api_failure_tolerance:
                        return make_outcome(
                            self.ref,
                            ERROR,
                            f"lost contact with the API server for {now - failing_since:.0f}s while "
                            f"watching {self.ref.title}: {describe_error(error)}",
                            job,
                        )
                    self.log.warning("Watching %s: %s; retrying", self.ref.title, describe_error(error))
                    # The last job seen is still running; only a deadline can end the wait meanwhile.
                    if job is not None and (outcome := self._check(job)):
                        return outcome
                    await self._sleep(
                        min(self.poll_interval, 2.0 ** min(errors, 5)),
                        job_state(job) if job else None,
                    )

    async def _follow_watch(
        self, jobs: Any, kind: JobKind, resource_version: str | None, state: JobState
    ) -> dict[str, Any] | None:
        """Follow one watch request until the job finishes (its outcome) or the request ends (None)."""
        remaining = self._remaining(state)
        timeout = self.watch_timeout if remaining is None else max(1, min(self.watch_timeout, int(remaining) + 1))
        async for event_type, obj in jobs.watch_job(
            kind, self.name, self.namespace, resource_version=resource_version, timeout_seconds=timeout
        ):
            if event_type == "DELETED":
                return make_outcome(self.ref, ERROR, f"{self.ref.title} was deleted outside this task", obj)
            if event_type in ("ADDED", "MODIFIED") and (outcome := self._check(obj)):
                return outcome
        # The request ended (server timeout, possibly a deadline): the caller relists and checks.
        return None

    async def _sleep(self, seconds: float, state: JobState | None) -> None:
        remaining = self._remaining(state)
        await asyncio.sleep(seconds if remaining is None else max(0.0, min(seconds, remaining)))

    async def on_kill(self) -> None:
        """A user killed the deferred task (mark failed, clear): delete the job it started."""
        if not self.delete_on_kill:
            return
        self.log.info("Task killed: deleting %s", self.ref.title)
        async with self._hook().job_client() as jobs:
            await asyncio.wait_for(
                jobs.delete_job(get_job_kind(self.kind), self.name, self.namespace, self.uid),
                _KILL_TIMEOUT_SECONDS,
            )
