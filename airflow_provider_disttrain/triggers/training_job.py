"""The trigger that waits for one training job from the triggerer.

All triggers of one triggerer share one watch per (cluster, kind, namespace): they subscribe to
``hooks.shared_watch``, which lists and watches the jobs the provider created (by their label) and
wakes a trigger when its job changes. A job without that label (a sensor on a name) is followed
through a watch of its own name. The trigger only judges what it is shown: it never raises out of
``run()``; every outcome is one event, ``{"status": "success" | "failed" | "timeout" | "lost_contact" |
"error", ...}``,
carrying the job's summary and a message. Deadlines are absolute epoch seconds, so a trigger that is
moved to another triggerer keeps the same ones, and each trigger wakes at its own deadline even when
nothing changes on the server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_disttrain.failures.controller_refusal import RefusalLooks, refusal, refused
from airflow_provider_disttrain.hooks.api_errors import describe_error
from airflow_provider_disttrain.hooks.faults import classify
from airflow_provider_disttrain.hooks.workload_follower import WorkloadFollower
from airflow_provider_disttrain.job.deadlines import Deadlines
from airflow_provider_disttrain.job.gpus import gpus_held
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.outcome import ERROR, TIMEOUT, JobRef, make_outcome
from airflow_provider_disttrain.job.progress import ProgressTracker
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.job.step import Wake, next_wake, step
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.kueue.dispatch import WorkerClusters
from airflow_provider_disttrain.kueue.hold import held_by_kueue
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from airflow_provider_disttrain.pods.live_logs import DEFAULT_BYTES_PER_SECOND
from airflow_provider_disttrain.triggers import watch_trouble
from airflow_provider_disttrain.triggers.deferred_kill import kill_deferred_job
from airflow_provider_disttrain.triggers.leader_log import LeaderLog
from airflow_provider_disttrain.triggers.stored_kwargs import (
    flat_keys,
    stored_connection,
    stored_kwargs,
    stored_values,
    warn_newer_kwargs,
)
from airflow_provider_disttrain.triggers.worker_pods import WorkerPods
from airflow_provider_disttrain.utils import clock as clocks
from airflow_provider_disttrain.utils import telemetry
from airflow_provider_disttrain.utils.clock import Clock
from airflow_provider_disttrain.utils.timeouts import within

if TYPE_CHECKING:
    from airflow_provider_disttrain.hooks.shared_watch import Subscription
    from airflow_provider_disttrain.hooks.watch_values import WatchProblem

PROVIDER_JOB_LABEL = TASK_INSTANCE_LABEL
"""Every job the provider creates carries it; the shared watch selects on its presence."""
PROVIDER_JOB_SELECTOR = PROVIDER_JOB_LABEL
SETTLE_SECONDS = 10.0
"""A trigger's event comes no sooner than this after its ``run()`` started. Airflow 3.3's scheduler fails
a deferred task whose trigger fired before it had drained the executor's stale SUCCESS of the deferring
try (the resumed try has the same key): apache/airflow#71580 and #72716, fixes #71579 and #72767 open.
A job that ends within seconds of the deferral (a quick job, a job already finished when a retry took
it over) would lose its task that way. Remove once the supported Airflow versions have the fix."""
_KILL_TIMEOUT_SECONDS = 30


def _labels(job: Mapping[str, Any]) -> Mapping[str, str]:
    return (job.get("metadata") or {}).get("labels") or {}


def _version(job: Mapping[str, Any]) -> str | None:
    return (job.get("metadata") or {}).get("resourceVersion")


class TrainingJobTrigger(BaseTrigger):
    """Fire once when the job succeeds, fails, misses a deadline, or can no longer be watched.

    :param kind: job kind from the kinds table, e.g. ``PyTorchJob``.
    :param name: job name.
    :param namespace: job namespace.
    :param uid: the job's uid; a job recreated under the same name is reported, not followed.
    :param connection: how to reach the cluster (``connection.ClusterConnection`` or its ``to_dict()``):
        the connection id and context, read in the triggerer; a kubeconfig only when the task's was a file.
    :param deadlines: the operator's ``Deadlines`` (epoch seconds) or its stored dict.
    :param wait_policy: the operator's ``WaitPolicy`` or its stored dict: ``poll_interval`` (the seconds
        between reads when polling, and the base of the error backoff), ``progress_interval`` (after a
        burst, at most one progress line per this many seconds), ``api_failure_tolerance`` (seconds of
        continuous API failure before a ``lost_contact`` event); its timeouts are in ``deadlines``.
    :param cleanup_policy: the operator's ``CleanupPolicy`` or its stored dict: ``on_kill`` deletes the
        job when a user kills the deferred task.
    :param watch_timeout: seconds one watch request stays open before it is renewed.
    :param gpus_per_replica: GPUs one pod of each replica type asks for (the manifest's, which the watch's
        view leaves out), for the ``disttrain.gpus_held`` telemetry gauge; None when not known (a sensor).
    :param stream_logs: follow the leader pod's log into this trigger's log while the job runs.
    :param stream_logs_bytes_per_second: at most this much of that log is written per second.
    :param worker_clusters: ``kueue.dispatch.WorkerClusters.to_dict()``: the connections of the MultiKueue
        worker clusters, where a dispatched job's leader log is followed (``leader_log``) and its pods kept
        (``worker_pods``: Kueue deletes them before the job ends; the event carries them).
    :param kubernetes_conn_id: stored rows of provider versions before ``connection`` (never written now),
        like ``cluster_context``, ``config_dict`` (a shipped kubeconfig) and ``connection_extras``.
    :param newer_kwargs: first, the keys of rows stored before the values above travelled whole, each
        one of their fields (``stored_kwargs.FLAT_KEYS``: ``startup_deadline``, ``poll_interval``,
        ``delete_on_kill``, ...); given, it overrides that field. Then keys this version does not know,
        from a row a newer provider version wrote (a rolling upgrade: a newer worker deferred, an older
        triggerer rebuilds). They are ignored with a warning, not refused: refusing fails the task;
        ignored, the job is still waited for with this version's behaviour. A row from an older version
        lacks the newer keys: each has its default.
    """

    def __init__(
        self,
        *,
        kind: str,
        name: str,
        namespace: str,
        uid: str | None = None,
        connection: ClusterConnection | Mapping[str, Any] | None = None,
        deadlines: Deadlines | Mapping[str, Any] | None = None,
        wait_policy: WaitPolicy | Mapping[str, Any] | None = None,
        cleanup_policy: CleanupPolicy | Mapping[str, Any] | None = None,
        watch_timeout: int = 300,
        gpus_per_replica: Mapping[str, int] | None = None,
        stream_logs: bool = False,
        stream_logs_bytes_per_second: int = DEFAULT_BYTES_PER_SECOND,
        worker_clusters: Mapping[str, Any] | None = None,
        kubernetes_conn_id: str | None = None,
        cluster_context: str | None = None,
        config_dict: dict[str, Any] | None = None,
        connection_extras: dict[str, Any] | None = None,
        **newer_kwargs: Any,
    ) -> None:
        super().__init__()
        flat = flat_keys(newer_kwargs)  # a row stored before the typed values travelled whole, or a caller's
        warn_newer_kwargs(self.log, newer_kwargs, kind, namespace, name)
        title = JobRef(kind, name, namespace).title
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.uid = uid
        self.connection = stored_connection(
            connection,
            kubernetes_conn_id,
            cluster_context,
            config_dict,
            connection_extras,
            log=self.log,
            kind=kind,
            namespace=namespace,
            name=name,
        )
        typed = {"deadlines": deadlines, "wait_policy": wait_policy, "cleanup_policy": cleanup_policy}
        self.deadlines, self.wait_policy, self.cleanup_policy = stored_values(typed, flat, log=self.log, title=title)
        self.watch_timeout = watch_timeout
        self.gpus_per_replica = dict(gpus_per_replica) if gpus_per_replica else None
        self.stream_logs = stream_logs
        self.stream_logs_bytes_per_second = stream_logs_bytes_per_second
        self.worker_clusters = WorkerClusters.from_dict(worker_clusters).to_dict()
        self._view: JobView | None = None  # the last look at the job: what it saw run stays run
        self._wake = Wake(None)  # when the next deadline passes, from the last step (``job.step``)
        self._leader_log: LeaderLog | None = None
        self._worker_pods = WorkerPods(self.ref, self.worker_clusters, self.log, stream_logs=stream_logs)
        self._workload = WorkloadFollower()
        self._waiting_reason: str | None = None  # Kueue's word on why the job waits, while it does
        # Progress lines for the task log (Airflow 3 shows a deferred task's trigger lines there).
        self._progress = ProgressTracker(interval=self.wait_policy.progress_seconds)
        self._looks: RefusalLooks | None = None  # when to read the job's Warning events (``controller_refusal``)
        self.clock: Clock | None = None
        """What tells the time (deadlines, outage lengths); the running loop's clock unless set."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            stored_kwargs(self),
        )

    def _clock(self) -> Clock:
        return self.clock or clocks.current()

    @property
    def ref(self) -> JobRef:
        return JobRef(self.kind, self.name, self.namespace, self.uid)

    def _hook(self) -> Any:
        # Imported here so that loading the trigger class (the UI does) does not import kubernetes_asyncio.
        from airflow_provider_disttrain.hooks.async_training_job import AsyncTrainingJobHook

        return AsyncTrainingJobHook.for_connection(self.connection)

    def _observe(self, job: Mapping[str, Any] | None) -> JobView:
        """The view of this look at the job, with what its Workload said (the one read of its state)."""
        never_admitted = self._workload.never_admitted
        self._view = JobView.observe(
            self.ref, job, previous=self._view, waiting_reason=self._waiting_reason, never_admitted=never_admitted
        )
        return self._view

    def _step(self, view: JobView) -> dict[str, Any] | None:
        """The wait's step on this look (``job.step``): its outcome, or None (and the next wake kept)."""
        moved = step(view, self.deadlines, self._clock().wall())
        if isinstance(moved, Wake):
            self._wake = moved
            return None
        return moved

    async def _observe_queue(self, job: Mapping[str, Any] | None, subscription: Subscription) -> None:
        """Follow the Workload of a job Kueue holds: why it waits goes to the progress lines and timeouts."""
        if job is None or not held_by_kueue(job):  # the common case, and every job on a cluster without Kueue
            self._waiting_reason = None
            await self._workload.stop()
            return
        options = {"watch_timeout": float(self.watch_timeout), "poll_interval": self.wait_policy.poll_seconds}
        self._waiting_reason = await self._workload.follow(job, self.connection, subscription, options, self.log)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        clock = self._clock()
        started = clock.monotonic()
        ended = False
        try:
            outcome = await self._wait_until_done()
            ended = True
        except Exception as error:  # The triggerer must always get an event, never a traceback.
            self.log.exception("Watching %s failed", self.ref.title)
            outcome = make_outcome(self.ref, ERROR, f"watching {self.ref.title} failed: {error!r}")
            ended = True
        finally:
            # Also when the triggerer cancels the trigger (cleared, marked failed, moved, deferral timeout):
            # nothing it started may outlive it. A cancelled follower records no position: the one saved
            # at most SAVE_EVERY_SECONDS ago lets the next trigger read on.
            await self._stop_following_logs(save=ended)
            kept = await self._worker_pods.end()
            await self._workload.stop()
            telemetry.census.forget(self._census_key)
        outcome = {**outcome, "pods": kept} if kept else outcome
        if (early := SETTLE_SECONDS - (clock.monotonic() - started)) > 0:
            await clock.sleep(early)
        yield TriggerEvent(outcome)

    async def _wait_until_done(self) -> dict[str, Any]:
        # Imported here so that loading the trigger class (the UI does) does not import the clients.
        from airflow_provider_disttrain.hooks.loop_pacing import pacer
        from airflow_provider_disttrain.hooks.watch_registry import subscribe

        # A triggerer that starts many triggers at once (a restart, a takeover) starts them a few per
        # turn of its event loop, so that their first steps do not hold the loop all in one turn.
        await pacer().turn()
        kind = get_job_kind(self.kind)
        options: dict[str, Any] = {
            "watch_timeout": float(self.watch_timeout),
            "poll_interval": self.wait_policy.poll_seconds,
        }
        connection = self.connection
        async with subscribe(
            connection, kind, self.namespace, self.name, label_selector=PROVIDER_JOB_SELECTOR, **options
        ) as subscription:
            outcome = await self._follow(subscription, labelled_only=True)
            await self._stop_following_logs()  # before the subscription (and its cluster client) ends
        if outcome is not None:
            return outcome
        # Not one of the jobs the provider labels: follow it through the watch of every job of its kind in
        # its namespace, shared by all such waits (a sensor on a name, an existing job). A watch per name
        # would hold one pooled connection each: at the pool's size (100) no other watch of the cluster,
        # labelled ones included, could get a connection. The shared watch caches only the jobs someone
        # waits for, so a busy namespace costs its events, not memory.
        async with subscribe(connection, kind, self.namespace, self.name, **options) as subscription:
            outcome = await self._follow(subscription, labelled_only=False)
            await self._stop_following_logs()
        assert outcome is not None  # only a labelled-only follow hands over
        return outcome

    async def _follow(self, subscription: Subscription, *, labelled_only: bool) -> dict[str, Any] | None:
        """Judge each view of the job until the wait is over (its outcome); None hands over to a name watch."""
        looked_up = False
        self._wake = next_wake(None, self.deadlines, self._clock().wall())
        last: JobView | None = None
        # A GET's view of the job that is newer than the watch's (a timeout was about to be judged on
        # a cache that had missed a change): used until the watch's view of the job moves.
        confirmed: tuple[str | None, dict[str, Any]] | None = None
        while True:
            entry = subscription.entry if subscription.synced else None
            if entry is not None:
                job = entry.job
                if confirmed is not None and confirmed[0] == _version(job):
                    job = confirmed[1]
                last = await self._look(job, subscription)
                outcome = self._step(last)
                timed_out = outcome is not None and confirmed is None and outcome["status"] == TIMEOUT
                if timed_out and (fresh := await self._read_quietly(subscription)) is not None:
                    confirmed = (_version(entry.job), fresh)
                    last = self._observe(fresh)
                    outcome = self._step(last)
                if outcome:
                    return outcome
                if entry.deleted:
                    return make_outcome(self.ref, ERROR, f"{self.ref.title} was deleted outside this task", entry.job)
            elif subscription.synced and labelled_only and subscription.listed:
                # Missing from a LIST of the labelled jobs sent after this wait began (so after its job was
                # created): not one the provider labels, or gone. The name watch's LIST, which every such
                # wait shares, tells which, so no GET here: 1,000 sensors starting at once would send 1,000,
                # and the transient answers interleaved with the waits' own state left ~7 KB a job of heap
                # the process kept (bench/trigger_scale.py --unlabelled).
                return None
            elif subscription.synced and not looked_up:
                # Not (yet) in the watch's view: created after its last event, deleted, or not labelled.
                try:
                    found = await subscription.read_view()
                except Exception as error:
                    if not classify(error).retried:
                        raise
                else:  # (a read that failed in an outage is tried again; the watch's problem bounds it)
                    looked_up = True
                    if found is not None and labelled_only and PROVIDER_JOB_LABEL not in _labels(found):
                        return None
                    last = await self._look(found, subscription) if found is not None else self._observe(None)
                    if outcome := self._step(last):
                        return outcome
            last_job = last.job if last is not None else None
            if outcome := await self._look_for_refusal(last_job, subscription):
                return outcome
            if outcome := self._judge_problem(subscription.problem, subscription.watch.ever_synced, last_job):
                return outcome
            if outcome := await self._check_deadline_unseen(last_job, subscription):
                return outcome
            await subscription.wait(self._next_wake(subscription.problem, last))

    async def _look(self, job: Mapping[str, Any], subscription: Subscription) -> JobView:
        """Take in one look at the job: its Workload, its view, the leader's log, the progress line."""
        await self._observe_queue(job, subscription)
        view = self._observe(job)
        self._worker_pods.look(view, subscription)  # where it was dispatched, and a MultiKueue worker's pods
        self._follow_logs(view, subscription)
        self._report_progress(view)
        return view

    @property
    def _refusal_looks(self) -> RefusalLooks:
        if self._looks is None:
            self._looks = RefusalLooks(get_job_kind(self.kind))
        return self._looks

    async def _look_for_refusal(
        self, job: Mapping[str, Any] | None, subscription: Subscription
    ) -> dict[str, Any] | None:
        """The refusal outcome when the job's controller refused it (``controller_refusal``): its Warning
        events are read while it has no condition, at most every ``LOOK_EVERY_SECONDS`` (the job itself
        never changes then, so ``_next_wake`` brings the trigger back for the next look)."""
        looks = self._refusal_looks
        if job is None or not looks.due(job, self._clock().wall()):
            return None
        try:
            events = await subscription.warning_events()
        except Exception as error:  # a look that failed only delays the answer to the next one
            self.log.warning("Could not read the Warning events of %s (%s)", self.ref.title, describe_error(error))
            return None
        words = refusal(looks.kind, job, events)
        return refused(self.ref, job, words) if words else None

    async def _read_quietly(self, subscription: Subscription) -> dict[str, Any] | None:
        """One GET of the job to confirm the watch's view before a deadline is judged on it; None when
        it cannot be read now (the watch's view is judged then) or is gone."""
        try:
            return await subscription.read_view()
        except Exception as error:
            self.log.warning(
                "Could not read %s to confirm its state before its deadline (%s); judging on the watch's view",
                self.ref.title,
                describe_error(error),
            )
            return None

    def _follow_logs(self, view: JobView, subscription: Subscription) -> None:
        """With ``stream_logs``, or a worker cluster mapped, follow the leader's log where its pods run (``leader_log``)
        once the job runs; a dispatched job's always, from its dispatch (``JobView.may_have_pods_elsewhere``)."""
        workers, rate = WorkerClusters.from_dict(self.worker_clusters), self.stream_logs_bytes_per_second
        due = view.may_have_pods_elsewhere if workers.maps_any else view.state is JobState.RUNNING
        if not (self.stream_logs or workers.maps_any) or self._leader_log is not None or not due:
            return
        kind, clock, own, finder = get_job_kind(self.kind), self._clock(), self.stream_logs, self._worker_pods.finder
        self._leader_log = LeaderLog(self.ref, kind, finder, self.log, bytes_per_second=rate, clock=clock, own=own)
        self._leader_log.start(subscription)

    async def _stop_following_logs(self, save: bool = True) -> None:
        """Stop following the leader's log, recording where it stopped with ``save`` (``LeaderLogFollower.end``)."""
        leader_log, self._leader_log = self._leader_log, None
        if leader_log is not None:
            await leader_log.end(save)

    def _report_progress(self, view: JobView) -> None:
        """Log a line when the job changed in a way worth telling (throttled per job, see ``progress``)."""
        state = view.state
        if view.job is None or state is None:
            return
        if line := self._progress.observe(view, now=self._clock().wall(), waiting_reason=self._waiting_reason):
            self.log.info("%s: %s", self.ref.title, line)
        if state.is_terminal:
            telemetry.census.forget(self._census_key)
        else:
            held = gpus_held(view, self.gpus_per_replica or {})
            telemetry.census.observe(self._census_key, self.ref.title, state.value, held)

    @property
    def _census_key(self) -> str:
        return f"{self.ref.title}#{id(self)}"

    def _judge_problem(
        self, problem: WatchProblem | None, had_access: bool, job: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        """An error outcome when the watch's trouble has lasted longer than this trigger tolerates."""
        tolerance, clock = self.wait_policy.api_failure_tolerance_seconds, self._clock()
        return watch_trouble.judge_problem(self.ref, problem, had_access, job, tolerance=tolerance, clock=clock)

    async def _check_deadline_unseen(
        self, job: Mapping[str, Any] | None, subscription: Subscription
    ) -> dict[str, Any] | None:
        """The execution deadline still ends a wait whose job could not be read yet (after one GET
        more, which may find the job finished)."""
        if job is not None or (deadline := self.deadlines.execution) is None or self._clock().wall() < deadline:
            return None
        fresh = await self._read_quietly(subscription)
        if fresh is not None and (outcome := self._step(self._observe(fresh))):
            return outcome
        message = f"{self.ref.title} did not finish within the task's execution_timeout"
        return make_outcome(self.ref, TIMEOUT, message, None)

    def _next_wake(self, problem: WatchProblem | None, view: JobView | None) -> float | None:
        """Seconds until this trigger must look again even if nothing changes: its next deadline."""
        clock, job = self._clock(), view.job if view is not None else None
        remaining = self._wake.seconds_from(clock.wall())
        if remaining is not None and remaining <= 0:
            # A deadline that passed without ending the wait cannot be judged yet (the watch has not
            # listed the job): wake when the watch changes, never spin.
            remaining = None
        due = [self._progress.seconds_until_due(clock.wall()), self._refusal_looks.seconds_until_due(job, clock.wall())]
        tolerance = self.wait_policy.api_failure_tolerance_seconds
        waits = [remaining, *due, watch_trouble.seconds_until_judged(problem, tolerance, clock)]
        known = [wait for wait in waits if wait is not None]
        return min(known) if known else None

    async def on_kill(self) -> None:
        """A user killed the deferred task (mark failed, clear): delete the job it started (``deferred_kill``)."""
        if not self.cleanup_policy.on_kill:
            return
        self.log.info("Task killed: deleting %s", self.ref.title)
        async with within(_KILL_TIMEOUT_SECONDS), self._hook().job_client() as jobs:
            await kill_deferred_job(jobs, self.ref, self.worker_clusters, self._clock(), self.log)
