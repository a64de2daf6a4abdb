"""Following the leader's log from the trigger while a deferred job runs (opt-in: ``stream_logs=True``).

One streamed request per following trigger: ``GET pods/{leader}/log?follow=true&timestamps=true``
through the triggerer's shared client of the cluster (``hooks.cluster_client``), so no connection or
SSL context is built per job. Lines go to the trigger's log, which Airflow 3 shows in the task's log.

Bounded: at most ``bytes_per_second`` of log text is written per job (a one-second burst); what is
over is dropped, and one note per second of dropping says how many lines and bytes were left out.

Resumed after a triggerer restart, not re-read: a trigger's kwargs are fixed when the task defers,
so the position cannot travel in them. It is kept on the job itself, in the annotation
``LOG_POSITION_ANNOTATION`` (the pod, and the last written line's timestamp and how many lines share
it - ``logs.LogCursor``), merge-patched at most every ``SAVE_EVERY_SECONDS`` and once more when the
trigger stops. The job is the one object every triggerer can read and that lives exactly as long as
the log matters; the metadata database is not reachable from a trigger, and the task state store is
not either. A new trigger reads the annotation (one GET of the job), asks the kubelet for the lines
since that line's second (``sinceTime``: the kubelet's own timestamps, so a triggerer whose clock is
ahead of the node's loses nothing, as it would counting ``sinceSeconds`` back on its own clock) and
skips those already written (``logs.new_lines``). At most ``SAVE_EVERY_SECONDS`` of lines may be
written twice after a crash; none are skipped.

Lines are read with a bound (``bounded_lines``): a line longer than ``MAX_STREAM_LINE_BYTES`` (a
progress bar redrawn with ``\r`` for hours is one line) is cut, where aiohttp's line reader would fail
on it at every retry; control characters never reach the task log (``logs.printable``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from airflow_provider_disttrain.hooks.api_errors import api_status
from airflow_provider_disttrain.hooks.cluster_client import ClusterClientClosed
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.pods.logs import LogCursor, leader_pods, new_lines, printable, since_time
from airflow_provider_disttrain.utils import clock as clocks
from airflow_provider_disttrain.utils.clock import Clock
from airflow_provider_disttrain.utils.timeouts import cancel_and_wait

LOG_POSITION_ANNOTATION = "disttrain.airflow.apache.org/log-position"
SAVE_EVERY_SECONDS = 30.0
DEFAULT_BYTES_PER_SECOND = 16_384
_RETRY_SECONDS = (2.0, 5.0, 15.0, 30.0)
_FINISHED_PHASES = ("Succeeded", "Failed")
# A line of the stream is cut after this many bytes (its timestamp comes first, so it still places the
# line); the rest up to its newline is skipped unread. The task log shows at most ``logs.MAX_LINE_BYTES``.
MAX_STREAM_LINE_BYTES = 65_536
_READ_CHUNK_BYTES = 65_536


async def bounded_lines(chunks: AsyncIterable[bytes], limit: int = MAX_STREAM_LINE_BYTES) -> AsyncIterator[bytes]:
    """The lines of a byte stream (without their newline), each at most ``limit`` bytes: a longer one is
    yielded cut, as soon as ``limit`` bytes of it arrived, and its rest is skipped.

    aiohttp's ``StreamReader`` iterates lines only up to its buffer's limit and raises on a longer one
    (the stream then fails at the same line every time it is retried); it has no reader that cuts.
    """
    buffer = bytearray()
    skipping = False  # inside a line that was cut already
    async for chunk in chunks:
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if not skipping:
                buffer += piece[: limit + 1 - len(buffer)]  # one byte over tells a line of exactly limit
                if len(buffer) > limit:
                    yield bytes(buffer[:limit]) + b" [line cut]"
                    buffer.clear()
                    skipping = True
                elif end >= 0:
                    yield bytes(buffer)
                    buffer.clear()
            if end < 0:
                break
            skipping = False
            start = end + 1
    if buffer and not skipping:
        yield bytes(buffer)


def encode_position(pod: str, cursor: LogCursor) -> str:
    return f"{pod}/{cursor.at}/{cursor.count}"


def decode_position(value: object) -> tuple[str, LogCursor] | None:
    """``(pod, cursor)`` from the annotation; None for a missing or unreadable one (read from the start)."""
    pod, _, rest = str(value or "").partition("/")
    at, _, count = rest.partition("/")
    if not (pod and at.isdigit() and count.isdigit()):
        return None
    return pod, LogCursor(int(at), int(count))


class ByteBudget:
    """A token bucket of bytes: ``rate`` per second, at most one second's worth saved up."""

    def __init__(self, rate: int) -> None:
        if rate <= 0:
            raise ValueError(f"stream_logs_bytes_per_second: expected a positive number, got {rate!r}")
        self.rate = float(rate)
        self._tokens = self.rate
        self._at: float | None = None

    def take(self, size: int, now: float) -> bool:
        if self._at is not None:
            self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if size > self._tokens:
            return False
        self._tokens -= size
        return True


class LeaderLogFollower:
    """Writes the leader pod's new log lines to ``log`` while it runs; cancel ``run()`` to stop.

    :param cluster: the triggerer's ``ClusterClient`` of the cluster the job's pods run on.
    :param read_job: reads the job (with its annotations), e.g. ``Subscription.read``.
    :param job_cluster: the ``ClusterClient`` of the job's own cluster, where the position is saved: a
        MultiKueue manager's, whose job mirrors the one running on a worker (default: ``cluster``).
    :param clock: wall time for the byte budget and the saving cadence (the running loop's clock by
        default).
    """

    def __init__(
        self,
        cluster: Any,
        kind: JobKind,
        name: str,
        namespace: str,
        log: Any,
        read_job: Callable[[], Awaitable[Mapping[str, Any] | None]],
        *,
        bytes_per_second: int = DEFAULT_BYTES_PER_SECOND,
        clock: Clock | None = None,
        job_cluster: Any = None,
    ) -> None:
        self.cluster = cluster
        self.job_cluster = job_cluster or cluster
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.log = log
        self.read_job = read_job
        self.budget = ByteBudget(bytes_per_second)
        self.clock = clock or clocks.current()
        self.pod: str | None = None
        self.cursor: LogCursor | None = None
        self.lines_written = 0
        self._saved: str | None = None
        self._saved_at = 0.0
        self._dropped_lines = 0
        self._dropped_bytes = 0
        self._dropped_since: float | None = None
        self._problems: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run ``run()`` as a task of the running loop, until ``end()``."""
        self._task = asyncio.get_running_loop().create_task(self.run())

    async def end(self, save: bool = True) -> None:
        """Stop following and (``save``) record where it stopped: the operator's final copy of the logs
        goes on from there, so the event is not held back waiting for the stream's last lines."""
        task, self._task = self._task, None
        if task is None:
            return
        await cancel_and_wait(task, f"Following the log of {self.kind.kind} {self.namespace}/{self.name}", self.log)
        if save:
            await self.stop()

    async def run(self) -> None:
        job = await self.read_job()
        annotations = ((job or {}).get("metadata") or {}).get("annotations") or {}
        if (position := decode_position(annotations.get(LOG_POSITION_ANNOTATION))) is not None:
            self.pod, self.cursor = position
            self._saved = encode_position(*position)
            self.log.info("Following the log of %s from where an earlier trigger stopped", self.pod)
        attempt = 0
        while True:
            written = self.lines_written
            try:
                if await self._follow_once() in _FINISHED_PHASES:
                    return  # the leader's log is complete; the task's final copy adds any last lines
            except asyncio.CancelledError:
                raise
            except ClusterClientClosed:
                return  # the trigger's watch (and its client) ended: so does following
            except Exception as error:
                self._note_once(type(error).__name__, f"Could not follow the leader's log ({error!r}); retrying")
            # A stream that brought nothing new (no leader pod yet, a refused request) is retried less often.
            attempt = 0 if self.lines_written > written else attempt + 1
            await self.clock.sleep(_RETRY_SECONDS[min(attempt, len(_RETRY_SECONDS) - 1)])

    async def stop(self) -> None:
        """Record the final position (the trigger is ending); never raises."""
        with contextlib.suppress(Exception):
            await self._save(force=True)

    async def _follow_once(self) -> str | None:
        """Stream the leader's log until the stream ends; the leader pod's phase (None: no leader yet)."""
        from airflow_provider_disttrain.hooks.async_training_job import AsyncJobClient

        async with self.cluster.log_stream() as (api, generation):
            jobs = AsyncJobClient(api)
            try:
                return await self._stream(jobs)
            except Exception as error:
                if api_status(error) == 401:  # expired credentials: the next try gets a renewed client
                    await self.cluster.renew(generation)
                raise

    async def _stream(self, jobs: Any) -> str | None:
        pods = await jobs.list_job_pods(self.kind, self.name, self.namespace)
        leaders = [pod for pod in leader_pods(self.kind, pods) if (pod.get("status") or {}).get("phase") != "Pending"]
        if not leaders:
            return None
        pod = leaders[-1]
        pod_name = pod["metadata"]["name"]
        if pod_name != self.pod:  # another leader pod (an MPI launcher retried): its log from the start
            self.pod, self.cursor = pod_name, None
        container = self.kind.main_container_name(pod)
        options: dict[str, Any] = {"container": container, "follow": True, "timestamps": True}
        if self.cursor is not None:
            # From the cursor's second on the node's clock (whole seconds, rounded down, so no line at the
            # cursor's time is missed); new_lines skips what was written already.
            options["since_time"] = since_time(self.cursor)
        response = await jobs.stream_pod_log(pod_name, self.namespace, **options)
        try:
            async for raw in bounded_lines(response.content.iter_chunked(_READ_CHUNK_BYTES)):
                self._write(raw.decode("utf-8", errors="replace").rstrip("\r"))
                await self._save()
        finally:
            response.release()
        self._flush_drops(force=True)
        await self._save(force=True)
        return str((pod.get("status") or {}).get("phase"))

    def _write(self, line: str) -> None:
        texts, cursor = new_lines(self.cursor, [line])
        self.cursor = cursor or self.cursor
        now = self.clock.wall()
        for text in map(printable, texts):
            size = len(text.encode())
            if self.budget.take(size, now):
                self._flush_drops()
                self.log.info("[%s] %s", self.pod, text)
                self.lines_written += 1
            else:
                self._dropped_lines += 1
                self._dropped_bytes += size
                self._dropped_since = self._dropped_since or now
        self._flush_drops()

    def _flush_drops(self, force: bool = False) -> None:
        """One note per second of dropping (or at the end of a stream) with what was left out."""
        if not self._dropped_lines or self._dropped_since is None:
            return
        if not force and self.clock.wall() - self._dropped_since < 1.0:
            return
        self.log.warning(
            "[%s] %d log lines (%d bytes) left out: over stream_logs' %d bytes per second",
            self.pod,
            self._dropped_lines,
            self._dropped_bytes,
            int(self.budget.rate),
        )
        self._dropped_lines = self._dropped_bytes = 0
        self._dropped_since = None

    async def _save(self, force: bool = False) -> None:
        if self.pod is None or self.cursor is None:
            return
        value = encode_position(self.pod, self.cursor)
        now = self.clock.wall()
        if value == self._saved or (not force and now - self._saved_at < SAVE_EVERY_SECONDS):
            return
        from airflow_provider_disttrain.hooks.async_training_job import AsyncJobClient

        self._saved_at = now  # a refused patch is tried again only after SAVE_EVERY_SECONDS too
        try:
            async with self.job_cluster.short_request() as (api, _):
                patch = {"metadata": {"annotations": {LOG_POSITION_ANNOTATION: value}}}
                await AsyncJobClient(api).merge_patch_job(self.kind, self.name, self.namespace, patch)
        except Exception as error:  # never cuts the stream short: a restart would only re-read more
            self._note_once(f"save {type(error).__name__}", f"Could not record the log position ({error!r})")
            return
        self._saved = value

    def _note_once(self, key: str, message: str) -> None:
        if key not in self._problems:
            self._problems.add(key)
            self.log.warning("%s %s/%s: %s", self.kind.kind, self.namespace, self.name, message)
