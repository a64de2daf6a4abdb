"""The telemetry a waiting trigger sends the deployment, received by a StatsD server on loopback: the
job's state and the GPUs its pods hold while it is waited for, and the watch's breaks by error class.

The trigger runs for real against the fake API server (see test_training_job.py), on virtual time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.statsd_listener import StatsdListener
from tests.unit.fakes import queued_status, running_status, succeeded_status
from tests.unit.triggers.helpers import job, make_trigger, started

pytestmark = pytest.mark.usefixtures("virtual_clock")


async def test_the_job_s_state_and_gpus_are_gauges_while_its_trigger_waits(
    apiserver: Any, statsd: StatsdListener
) -> None:
    await apiserver.put(job(queued_status()))
    task = await started(make_trigger(apiserver, gpus_per_replica={"Master": 8, "Worker": 8}), apiserver)
    statsd.wait_for("disttrain.jobs.queued")
    assert statsd.last_gauges()["disttrain.jobs.queued"] == 1
    assert statsd.last_gauges()["disttrain.triggers.waiting"] == 1

    await apiserver.put(job(running_status(workers=2)))
    while statsd.last_gauges().get("disttrain.jobs.running") != 1:
        await asyncio.sleep(0.05)
    # Master 1 + Worker 2 active, 8 GPUs each.
    assert statsd.last_gauges()["disttrain.gpus_held"] == 24

    await apiserver.put(job(succeeded_status(workers=2)))
    assert (await task)["status"] == "success"
    assert statsd.last_gauges() == {
        "disttrain.triggers.waiting": 0,
        "disttrain.gpus_held": 0,
        "disttrain.jobs.queued": 0,
        "disttrain.jobs.suspended": 0,
        "disttrain.jobs.running": 0,
    }


async def test_each_break_of_the_shared_watch_is_a_restart_and_an_api_error_of_its_class(
    apiserver: Any, statsd: StatsdListener
) -> None:
    await apiserver.put(job(running_status()))
    task = await started(make_trigger(apiserver), apiserver)

    await apiserver.expire_watches()  # 410 inside the stream: relisted
    await asyncio.sleep(5)
    apiserver.fail_next("watch", 503, reason="ServiceUnavailable")
    await apiserver.drop_watches()  # the stream is cut mid-chunk; the next watch request is answered 503
    await asyncio.sleep(30)
    await apiserver.put(job(succeeded_status()))
    assert (await task)["status"] == "success"

    assert statsd.counters() == {
        "disttrain.watch.restarts.expired": 1,
        "disttrain.api_errors.expired": 1,
        "disttrain.watch.restarts.connection": 1,
        "disttrain.api_errors.connection": 1,
        "disttrain.watch.restarts.server": 1,
        "disttrain.api_errors.server": 1,
    }
