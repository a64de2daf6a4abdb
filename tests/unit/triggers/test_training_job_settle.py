"""The trigger's settle time: no event sooner than SETTLE_SECONDS after ``run()`` started.

Airflow 3.3's scheduler fails a deferred task whose trigger fires before the scheduler has drained the
stale executor SUCCESS of the deferring try (apache/airflow#71580, #72716). A job that is already over
when its trigger starts must therefore not be reported at once; a job that ends later is reported when
it ends, with no delay added. Runs on virtual time, so the times are exact.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.triggers.training_job import SETTLE_SECONDS
from airflow_provider_disttrain.utils.clock import LoopClock
from tests.unit.fakes import failed_status, running_status, succeeded_status
from tests.unit.triggers.helpers import job, make_trigger, run_once, started

pytestmark = [pytest.mark.usefixtures("virtual_clock"), pytest.mark.trigger_settle]


async def test_a_job_already_succeeded_is_reported_after_the_settle_time(
    apiserver: Any, virtual_clock: LoopClock
) -> None:
    await apiserver.put(job(succeeded_status()))
    begun = virtual_clock.monotonic()

    event = await run_once(make_trigger(apiserver))

    assert event["status"] == "success"
    assert SETTLE_SECONDS == 10.0
    assert virtual_clock.monotonic() - begun == pytest.approx(SETTLE_SECONDS, abs=0.05)


async def test_a_job_already_failed_waits_the_settle_time_too(apiserver: Any, virtual_clock: LoopClock) -> None:
    await apiserver.put(job(failed_status()))
    begun = virtual_clock.monotonic()

    event = await run_once(make_trigger(apiserver))

    assert event["status"] == "failed"
    assert virtual_clock.monotonic() - begun == pytest.approx(SETTLE_SECONDS, abs=0.05)


async def test_a_job_that_ends_after_the_settle_time_is_reported_without_delay(
    apiserver: Any, virtual_clock: LoopClock
) -> None:
    await apiserver.put(job(running_status()))
    begun = virtual_clock.monotonic()
    task = await started(make_trigger(apiserver), apiserver)

    await virtual_clock.sleep(60.0 - (virtual_clock.monotonic() - begun))
    await apiserver.put(job(succeeded_status()))
    event = await task

    assert event["status"] == "success"
    assert virtual_clock.monotonic() - begun == pytest.approx(60.0, abs=0.5)
