"""Telemetry: what the provider tells the deployment about itself, through Airflow's own ``Stats``
(StatsD, DogStatsD or OpenTelemetry, as ``[metrics]`` configures it), so the numbers land where the
platform team already looks. (The trainer's own numbers are the training metrics, ``metrics.py``.)

Metric names (Airflow prefixes them with ``[metrics] statsd_prefix``, ``airflow`` by default); the word
after the last dot of a counter is its class, so plain StatsD, which drops tags, still tells them apart:

- ``disttrain.triggers.waiting`` (gauge): the provider's triggers waiting in this triggerer process;
- ``disttrain.jobs.<state>`` (gauge, ``queued``/``suspended``/``running``): the jobs they wait for, by state;
- ``disttrain.gpus_held`` (gauge): GPUs the pods of those jobs hold now (active replicas x their GPUs);
- ``disttrain.watch.restarts.<class>`` (counter): a shared watch broke and was restarted, by error class;
- ``disttrain.gpu_seconds`` (counter): GPU-seconds a finished job's pods held (``job/usage.py``), sent once
  per job by the task that saw it finish, tagged ``namespace`` and ``queue`` (its Kueue LocalQueue, or
  ``none``); summed over time it answers "GPU-hours per namespace, per queue";
- ``disttrain.api_errors.<class>`` (counter): an API request of the provider failed, by error class
  (``api_errors.error_class``: ``connection``, ``stream``, ``credentials``, ``expired``, ``unauthorized``,
  ``forbidden``, ``throttled``, ``server``, ``client``, ``local``).

Tags (``kind``, ``namespace``, ``hostname``) go with each, for the backends that keep them. The gauges are
per triggerer process, like Airflow's own ``triggers.running``: with several triggerers, sum them by the
``hostname`` tag (DogStatsD, InfluxDB-style tags or OpenTelemetry); plain StatsD keeps the last one sent.

``Stats`` of the task SDK is the one providers are meant to use, but only a task process initialises it:
the triggerer initialises Airflow core's copy. So this module initialises the SDK's once per process,
from ``[metrics]``, as the OpenLineage provider does for its executor processes (none of the libraries
offers "initialise unless done"). Telemetry must never fail the wait: every emission swallows its errors.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

PREFIX = "disttrain"
CENSUS_STATES = ("queued", "suspended", "running")
"""The states a waited-for job can be in (a finished one is no longer waited for)."""

_initialised_in: int | None = None  # the pid that initialised the SDK's Stats (a fork must do it again)


def _stats() -> Any:
    """The task SDK's ``Stats``, initialised from ``[metrics]`` once per process."""
    global _initialised_in
    from airflow.sdk.observability.stats import Stats

    if _initialised_in != os.getpid():
        _initialised_in = os.getpid()
        from airflow.sdk import conf
        from airflow.sdk.observability.metrics import stats_utils

        try:  # Airflow 3.3
            Stats.initialize(
                factory=stats_utils.get_stats_factory(),
                export_legacy_names=conf.getboolean("metrics", "legacy_names_on", fallback=True),
            )
        except TypeError:  # Airflow 3.2: the factory takes the Stats class, initialize takes only it
            Stats.initialize(factory=stats_utils.get_stats_factory(Stats))  # type: ignore[call-arg]
    return Stats


_failed_in: int | None = None  # the pid that already said its telemetry fails (once per process, not per metric)


def _emit(method: str, name: str, *args: Any, tags: Mapping[str, Any]) -> None:
    global _failed_in
    try:
        getattr(_stats(), method)(f"{PREFIX}.{name}", *args, tags={"hostname": socket.gethostname(), **tags})
    except Exception:  # a telemetry backend must never break the wait
        if _failed_in != os.getpid():
            _failed_in = os.getpid()
            log.warning("The provider's telemetry cannot be sent (said once per process)", exc_info=True)


def api_error(error_class: str, **tags: Any) -> None:
    _emit("incr", f"api_errors.{error_class}", tags=tags)


def gpu_seconds(seconds: float, *, namespace: str, queue: str | None) -> None:
    """A finished job held ``seconds`` GPU-seconds: counted whole (a counter's increment is an integer for
    StatsD and for Airflow's own ``Stats.incr``), none sent for a job that held no GPU."""
    if (count := round(seconds)) > 0:
        _emit("incr", "gpu_seconds", count, tags={"namespace": namespace, "queue": queue or "none"})


def watch_restart(error_class: str, **tags: Any) -> None:
    _emit("incr", f"watch.restarts.{error_class}", tags=tags)


class JobCensus:
    """The jobs this process's triggers wait for: their state and GPUs held, sent as gauges on each change.

    A gauge is sent only when something changed (a few times in a job's life), all of them at once so a
    state that emptied is sent as 0, and at most once per turn of the event loop (``_send``). One dict
    entry per waiting trigger. A job two triggers wait for (its operator's and a sensor's) counts once in
    ``jobs.*`` and ``gpus_held``, with the GPUs of whichever trigger knows them (a sensor knows the job
    only from the cluster), and twice in ``triggers.waiting``.
    """

    def __init__(self) -> None:
        self._triggers: dict[str, tuple[str, str, int]] = {}  # trigger -> (job, state, GPUs held)
        # The loop a sending is scheduled on: one a closed loop never ran must not stop the gauges for good.
        self._send_scheduled_on: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return len(self._triggers)

    def observe(self, trigger: str, job: str, state: str, gpus_held: int) -> None:
        """The trigger ``trigger`` sees its job ``job`` (the job's identity) in ``state`` holding ``gpus_held``."""
        entry = (job, state, gpus_held)
        if self._triggers.get(trigger) != entry:
            self._triggers[trigger] = entry
            self._send()

    def forget(self, trigger: str) -> None:
        """The trigger ended (its job finished, or the trigger was cancelled or moved)."""
        if self._triggers.pop(trigger, None) is not None:
            self._send()

    def totals(self) -> dict[str, int]:
        """``{state: jobs}`` for each of ``CENSUS_STATES``, ``gpus_held`` and ``waiting`` (triggers)."""
        jobs: dict[str, tuple[str, int]] = {}
        for job, state, gpus in self._triggers.values():
            # The newest state any watcher saw would need a clock; the GPUs known are the larger figure.
            if job not in jobs or gpus > jobs[job][1]:
                jobs[job] = (state, gpus)
        totals = dict.fromkeys(CENSUS_STATES, 0)
        for state, _ in jobs.values():
            totals[state] = totals.get(state, 0) + 1
        return {**totals, "gpus_held": sum(gpus for _, gpus in jobs.values()), "waiting": len(self._triggers)}

    def _send(self) -> None:
        """Send the gauges once the loop's turn is over: a triggerer starting 1,000 triggers changes the
        census 1,000 times in a few turns, and each sending would count every waiting trigger again
        (quadratic: about 0.4 s of blocked loop at 1,000). Without a running loop, at once."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._send_now()
            return
        if self._send_scheduled_on is not loop:
            self._send_scheduled_on = loop
            loop.call_soon(self._send_now)

    def _send_now(self) -> None:
        self._send_scheduled_on = None
        totals = self.totals()
        _emit("gauge", "triggers.waiting", totals.pop("waiting"), tags={})
        _emit("gauge", "gpus_held", totals.pop("gpus_held"), tags={})
        for state, count in totals.items():
            _emit("gauge", f"jobs.{state}", count, tags={})


census = JobCensus()
"""The triggerer process's census (one event loop per triggerer process)."""
