"""A triggerer that starts many training triggers at once does not hold its event loop for all of them in
one turn: the triggers start, and the first LIST of their shared watch wakes them, a few per turn of
the loop (``hooks.loop_pacing``); the census's gauges are sent once per turn, not once per trigger.

Turns are counted by a callback that schedules itself for the next turn; what each trigger or
subscriber does is stamped with the count when it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import pytest

from airflow_provider_disttrain.hooks import loop_pacing, shared_watch
from airflow_provider_disttrain.hooks.shared_watch import SharedWatch
from airflow_provider_disttrain.hooks.watch_registry import subscribe
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.utils import telemetry
from tests.unit.fakes import make_job, running_status
from tests.unit.triggers.helpers import make_trigger
from tests.unit.waiting import until

pytestmark = pytest.mark.usefixtures("virtual_clock")

PER_TURN = 10
MANY = 100  # ten turns' worth


class Turns:
    """The event loop's turns so far: a callback that schedules itself for the next turn."""

    def __init__(self) -> None:
        self.count = 0
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


@pytest.fixture(autouse=True)
def small_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_pacing, "WAKES_PER_TURN", PER_TURN)
    monkeypatch.setattr(loop_pacing, "_pacers", type(loop_pacing._pacers)())  # this test's loop's pacer anew
    # The turn counting keeps the loop busy, and virtual time stands still while it is: a watch's wait for
    # its subscribers to stop arriving would never end (test_the_first_list_waits_for_subscribers...).
    monkeypatch.setattr(shared_watch, "ARRIVALS_MAX_SECONDS", 0.0)


def most_in_one_turn(stamps: list[int]) -> int:
    # A turn's group may straddle the counting callback's place in the turn: two turns' worth at most.
    return max(Counter(stamps).values())


async def put_jobs(apiserver: Any, count: int) -> list[str]:
    names = [f"train-{index:03d}" for index in range(count)]
    for name in names:
        await apiserver.put(
            make_job(name, "ml", uid=f"uid-{name}", status=running_status(), labels={TASK_INSTANCE_LABEL: name})
        )
    return names


async def test_the_first_list_wakes_its_many_subscribers_a_few_per_turn(apiserver: Any) -> None:
    names = await put_jobs(apiserver, MANY)
    connection = ClusterConnection(kubeconfig=apiserver.kubeconfig())
    woken: list[int] = []
    turns = Turns()

    async def wait_for_first_view(subscription: Any) -> None:
        await subscription.wait(None)
        woken.append(turns.count)

    async with contextlib.AsyncExitStack() as stack:
        subscriptions = [
            await stack.enter_async_context(
                subscribe(connection, get_job_kind("PyTorchJob"), "ml", name, label_selector=TASK_INSTANCE_LABEL)
            )
            for name in names
        ]
        waiters = [asyncio.create_task(wait_for_first_view(subscription)) for subscription in subscriptions]
        await asyncio.wait_for(asyncio.gather(*waiters), 60)
        turns.stop()

        assert all(subscription.entry is not None for subscription in subscriptions)  # every one was served
        assert most_in_one_turn(woken) <= 2 * PER_TURN
        assert apiserver.count("list") == 1  # and with the one LIST as before


async def test_the_first_list_waits_for_subscribers_that_arrive_one_after_another(
    apiserver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_watch, "ARRIVALS_MAX_SECONDS", 2.0)
    names = await put_jobs(apiserver, MANY)
    connection = ClusterConnection(kubeconfig=apiserver.kubeconfig())

    async with contextlib.AsyncExitStack() as stack:
        subscriptions = []
        for name in names:  # as Airflow starts triggers: one after another, not all in one turn
            subscriptions.append(
                await stack.enter_async_context(
                    subscribe(connection, get_job_kind("PyTorchJob"), "ml", name, label_selector=TASK_INSTANCE_LABEL)
                )
            )
            await asyncio.sleep(shared_watch.ARRIVALS_QUIET_SECONDS / 4)
        await until(lambda: subscriptions[0].synced)

        # One LIST saw every job: no trigger has to read its own with a GET.
        assert [sub.name for sub in subscriptions if sub.entry is None] == []
        assert apiserver.count("list") == 1


async def test_triggers_started_at_once_start_a_few_per_turn(apiserver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    names = await put_jobs(apiserver, MANY)
    subscribed: list[int] = []
    subscribe_to_watch = SharedWatch.subscribe

    def stamped(watch: SharedWatch, *args: Any, **kwargs: Any) -> Any:
        subscribed.append(turns.count)
        return subscribe_to_watch(watch, *args, **kwargs)

    monkeypatch.setattr(SharedWatch, "subscribe", stamped)
    turns = Turns()

    async def run(trigger: Any) -> None:
        async for _event in trigger.run():
            return

    # As the scale benchmark's child starts them: every trigger's task created in one callback.
    tasks = [asyncio.create_task(run(make_trigger(apiserver, name=name, uid=f"uid-{name}"))) for name in names]
    while len(subscribed) < MANY and turns.count < 1000:  # turns, not time: the counting keeps the loop busy
        await asyncio.sleep(0)
    turns.stop()
    assert len(subscribed) == MANY
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

    assert most_in_one_turn(subscribed) <= 2 * PER_TURN


async def test_the_census_sends_its_gauges_once_per_turn_with_the_last_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, Any]] = []
    monkeypatch.setattr(telemetry, "_emit", lambda method, name, value, tags: sent.append((name, value)))
    census = telemetry.JobCensus()

    for index in range(MANY):  # as many triggers seeing their jobs in one turn of the loop
        census.observe(f"trigger-{index}", f"job-{index}", "running", 2)
    census.forget("trigger-0")
    await asyncio.sleep(0)

    assert dict(sent) == {
        "triggers.waiting": MANY - 1,
        "gpus_held": 2 * (MANY - 1),
        "jobs.queued": 0,
        "jobs.suspended": 0,
        "jobs.running": MANY - 1,
    }
    assert len(sent) == 5  # once, all five gauges


async def test_a_waiter_cancelled_before_its_turn_loses_its_place_and_the_rest_are_served() -> None:
    pacer = loop_pacing.pacer()
    turns = Turns()
    served: list[int] = []

    async def starting(index: int) -> None:
        await pacer.turn()
        served.append(index)

    tasks = [asyncio.create_task(starting(index)) for index in range(3 * PER_TURN)]
    await asyncio.sleep(0)  # every one has asked for its turn
    tasks[-1].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    turns.stop()

    assert sorted(served) == list(range(3 * PER_TURN - 1))
    assert len(pacer) == 0
