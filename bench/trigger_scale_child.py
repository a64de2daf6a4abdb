"""The measured process of bench/trigger_scale.py: N waits in ONE asyncio loop, as a triggerer runs them.

    python bench/trigger_scale_child.py <report fd> provider|anchor

It imports everything first and says ``ready`` (the parent takes the RSS baseline then), reads one
JSON line of configuration from stdin, starts the waits, and reports each event as it happens. A
second stdin line (or EOF: the parent is gone) cancels what still waits, as the triggerer cancels
triggers it no longer runs, and the process sends its report: every API request it sent (counted
by an aiohttp TraceConfig on every session, by verb as the API server names them), the event
loop's oversleep samples, and how many warnings were logged. Messages go to the report fd as JSON
lines; stdout/stderr are left to Airflow's logging.

Beside the waits, a plain watch of the namespace's jobs in the same loop (no trigger, no cache: the
watch's lines from the collection's version when the waits start) notes when it first sees each
job's Succeeded/Failed condition. The trigger's event time minus that is the provider's own share
of the latency, free of the API server's and the other process's delays. Its requests are not
counted with the waits'; its one connection is.

Modes:
- ``provider``: ``TrainingJobTrigger.run()`` per job, each built from its own copy of the kwargs
  (the triggerer deserializes every trigger's kwargs separately).
- ``anchor``: what a user would otherwise write, mirroring the cncf ``KubernetesJobTrigger``: one
  ``AsyncKubernetesHook`` per trigger and, every ``poll_interval`` s, ``async with hook.get_conn()``
  (a new API client per call, as ``AsyncKubernetesHook.get_job_status`` does) and one GET.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import json
import logging
import os
import pkgutil
import re
import sys
import threading
import time
from typing import Any, TextIO

import aiohttp
import structlog
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from kubernetes_asyncio import client as async_client
from trigger_scale_lib import classify_request

import airflow_provider_disttrain
import airflow_provider_disttrain.hooks
import airflow_provider_disttrain.triggers
from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

TICK_SECONDS = 0.1
_REFERENCE = contextvars.ContextVar("reference", default=False)
"""Set in the plain watch's task: its requests are not the waits' and are left out of the counts."""
# The trigger's progress lines: "<Kind> <namespace>/<name>: <state> (...)" (job/progress.py).
PROGRESS_LINE = re.compile(r"^\w+ [\w.-]+/[\w.-]+: (queued|suspended|running|succeeded|failed) \(")


def _import_provider_modules() -> None:
    """Import every hook and trigger module now, so that the baseline includes them (the trigger
    imports its hook lazily, and a rewrite may add modules beside it)."""
    for package in (airflow_provider_disttrain.hooks, airflow_provider_disttrain.triggers):
        for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            try:
                importlib.import_module(module.name)
            except Exception as error:  # a module the trigger does not use may be half-written
                print(f"importing {module.name} failed: {error!r}", file=sys.stderr)


class Recorder:
    """What the process reports: requests, loop lag, warnings; writes JSON lines to the parent."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.requests: list[tuple[float, str, str]] = []
        self.lags: list[float] = []
        self.warnings = 0
        self.progress_lines = 0  # the triggers' progress lines ("PyTorchJob ns/name: running ...")
        self.streamed_lines = 0  # leader log lines written by stream_logs ("[pod] text")
        self.seen_finished: dict[str, float] = {}  # job name -> when the plain watch first saw it end

    def send(self, message: dict[str, Any]) -> None:
        with self.lock:
            self.out.write(json.dumps(message) + "\n")
            self.out.flush()

    def install(self) -> None:
        """Count every HTTP request of every aiohttp session, and every warning logged."""
        trace = aiohttp.TraceConfig()

        async def on_request_start(session: Any, context: Any, params: Any) -> None:
            if _REFERENCE.get():
                return
            resource, verb = classify_request(params.method, params.url.path, params.url.query)
            self.requests.append((time.time(), resource, verb))

        trace.on_request_start.append(on_request_start)
        original_init = aiohttp.ClientSession.__init__

        def init(session: Any, *args: Any, trace_configs: Any = None, **kwargs: Any) -> None:
            original_init(session, *args, trace_configs=[*(trace_configs or []), trace], **kwargs)

        aiohttp.ClientSession.__init__ = init  # type: ignore[method-assign]

        # Airflow logs through structlog (the trigger's self.log); libraries through stdlib logging.
        def count_structlog(logger: Any, method: str, event: Any) -> Any:
            if method in ("warning", "warn", "error", "exception", "critical"):
                self.warnings += 1
            elif method == "info" and isinstance(event, dict):
                # Airflow's bound loggers format the message before the processors see it.
                args = tuple(event.get("positional_args") or ())
                text = str(event.get("event", ""))
                text = text % args if args else text
                self.streamed_lines += text.startswith("[scale-")  # live_logs: "[<pod>] <line>"
                self.progress_lines += bool(PROGRESS_LINE.match(text))
            return event

        config = structlog.get_config()
        structlog.configure(processors=[count_structlog, *config["processors"]])
        recorder = self

        class CountWarnings(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                recorder.warnings += 1

        logging.getLogger().addHandler(CountWarnings(logging.WARNING))


async def _tick(recorder: Recorder) -> None:
    """Oversleep of a short sleep: how long the loop was busy when a timer was due."""
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(TICK_SECONDS)
        recorder.lags.append(max(0.0, loop.time() - before - TICK_SECONDS))


async def _provider_wait(job: dict[str, Any], kwargs_json: str, recorder: Recorder) -> None:
    kwargs = {**json.loads(kwargs_json), **job}  # name, uid, startup_deadline
    trigger = TrainingJobTrigger(**kwargs)
    async with contextlib.aclosing(trigger.run()) as events:
        async for event in events:
            payload = event.payload
            recorder.send(
                {
                    "type": "event",
                    "name": job["name"],
                    "t": time.time(),
                    "status": payload.get("status"),
                    "message": str(payload.get("message", ""))[:300],
                }
            )
            return  # the triggerer takes the first event and drops the trigger


def _finished(job: dict[str, Any]) -> str | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Succeeded", "Failed"):
            return "success" if condition["type"] == "Succeeded" else "error"
    return None


async def _anchor_wait(job: dict[str, Any], config: dict[str, Any], recorder: Recorder) -> None:
    hook = AsyncKubernetesHook(conn_id=config["conn_id"])  # cached per trigger, as KubernetesJobTrigger.hook
    group, version, plural = config["group"], config["version"], config["plural"]
    try:
        while True:
            async with hook.get_conn() as api:
                obj = await async_client.CustomObjectsApi(api).get_namespaced_custom_object(
                    group, version, config["namespace"], plural, job["name"]
                )
            if status := _finished(obj):
                recorder.send({"type": "event", "name": job["name"], "t": time.time(), "status": status})
                return
            await asyncio.sleep(config["poll_interval"])
    except asyncio.CancelledError:
        raise
    except Exception as error:  # the cncf trigger would fail the task: an event that is not success
        status = getattr(error, "status", None)  # e.g. 429 when API Priority and Fairness sheds load
        message = f"{type(error).__name__} {status or ''} {getattr(error, 'reason', '') or repr(error)}"
        recorder.send({"type": "event", "name": job["name"], "t": time.time(), "status": "error", "message": message})


async def _plain_watch(config: dict[str, Any], recorder: Recorder) -> None:
    """WATCH the namespace's jobs with one client and note when each is first seen finished."""
    _REFERENCE.set(True)
    group, version, plural = config["group"], config["version"], config["plural"]

    def see(job: dict[str, Any]) -> None:
        name = (job.get("metadata") or {}).get("name")
        if name and name not in recorder.seen_finished and _finished(job):
            recorder.seen_finished[name] = time.time()

    async with AsyncKubernetesHook(conn_id=config["conn_id"]).get_conn() as api:
        objects = async_client.CustomObjectsApi(api)
        while True:  # from the collection's version (no job has finished yet), until a 410 or an error
            try:
                # One item: only the collection's resourceVersion is wanted. A LIST of every job would
                # add its parsed objects to the measured process's memory and block its loop.
                listed = await objects.list_namespaced_custom_object(
                    group, version, config["namespace"], plural, limit=1
                )
                version_seen = listed["metadata"]["resourceVersion"]
                await _watch_from(objects, config, version_seen, see)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a broken stream: watch again (jobs seen finished stay seen)
                print(f"plain watch: {error!r}; watching again", file=sys.stderr, flush=True)
                await asyncio.sleep(1)


async def _watch_from(objects: Any, config: dict[str, Any], version_seen: str, see: Any) -> None:
    """Watch requests from ``version_seen`` on; returns on a 410 (the caller starts over)."""
    while True:
        response = await objects.list_namespaced_custom_object(
            config["group"],
            config["version"],
            config["namespace"],
            config["plural"],
            watch=True,
            resource_version=version_seen,
            allow_watch_bookmarks=True,
            timeout_seconds=240,
            _request_timeout=300,  # the client's own default total timeout would cut a quiet watch
            _preload_content=False,
        )
        try:
            async for line in response.content:
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    return
                version_seen = event["object"]["metadata"].get("resourceVersion", version_seen)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    see(event["object"])
        finally:
            response.release()


def _wait_for_stop(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    sys.stdin.readline()  # a line, or EOF when the parent is gone
    loop.call_soon_threadsafe(stop.set)


async def run(mode: str, config: dict[str, Any], recorder: Recorder) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    threading.Thread(target=_wait_for_stop, args=(loop, stop), daemon=True).start()
    ticker = asyncio.create_task(_tick(recorder))
    plain_watch = asyncio.create_task(_plain_watch(config, recorder))
    kwargs_json = json.dumps(config.get("trigger_kwargs"))
    if mode == "provider":
        waits = [asyncio.create_task(_provider_wait(job, kwargs_json, recorder)) for job in config["jobs"]]
    else:
        waits = [asyncio.create_task(_anchor_wait(job, config, recorder)) for job in config["jobs"]]
    recorder.send({"type": "started", "t": time.time()})
    await stop.wait()
    for task in (*waits, ticker, plain_watch):
        task.cancel()
    results = await asyncio.gather(*waits, ticker, plain_watch, return_exceptions=True)
    crashed = [repr(r) for r in results if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)]
    recorder.send(
        {
            "type": "report",
            "requests": recorder.requests,
            "lags": recorder.lags,
            "warnings": recorder.warnings,
            "progress_lines": recorder.progress_lines,
            "streamed_lines": recorder.streamed_lines,
            "seen_finished": recorder.seen_finished,
            "crashed": crashed[:20],
        }
    )


def main() -> int:
    report_fd, mode = int(sys.argv[1]), sys.argv[2]
    if mode not in ("provider", "anchor"):
        raise SystemExit(f"mode must be provider or anchor, got {mode!r}")
    recorder = Recorder(os.fdopen(report_fd, "w"))
    _import_provider_modules()
    recorder.install()
    recorder.send({"type": "ready", "pid": os.getpid(), "provider": airflow_provider_disttrain.__path__[0]})
    line = sys.stdin.readline()
    if not line:
        return 1
    config = json.loads(line)
    if not config.get("progress", True):
        # --no-progress: the trigger's tracker says nothing, to measure what progress lines cost by difference.
        from airflow_provider_disttrain.job.progress import ProgressTracker

        ProgressTracker.observe = lambda self, job, *, now, waiting_reason=None: None  # type: ignore[method-assign]
    asyncio.run(run(mode, config, recorder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
