"""Shared fixtures of the unit tests: real manifests, job status objects and pods as YAML files, a
virtual clock, and a fake API server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import looptime
import pytest
import yaml

from airflow_provider_disttrain.utils import clock, telemetry
from airflow_provider_disttrain.utils.clock import LoopClock
from tests.statsd_listener import PREFIX as STATSD_PREFIX
from tests.statsd_listener import StatsdListener

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"


class _ApiServerLoader(yaml.SafeLoader):
    """A YAML loader that reads objects the way they arrive from the API server (JSON).

    Timestamps stay strings, as in the API's JSON, instead of becoming ``datetime`` objects.
    """


_ApiServerLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


UNIT_TEST_TIMEOUT_SECONDS = 120


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A unit test that hangs fails the run at once, with every thread's stack, instead of holding CI
    until its overall limit. The thread method, because pytest-timeout's default (SIGALRM raising
    into the main thread) is swallowed by a running event loop, which logs the exception of the
    callback it interrupted and goes on."""
    unit_dir = Path(__file__).resolve().parent
    for item in items:
        if unit_dir in item.path.parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TEST_TIMEOUT_SECONDS, method="thread"))


@pytest.fixture(autouse=True)
def called_by_the_task_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests call ``execute`` directly; tell Airflow's guard against that it is on purpose."""
    from airflow.sdk.bases.operator import ExecutorSafeguard

    monkeypatch.setattr(ExecutorSafeguard, "test_mode", True)


@pytest.fixture(autouse=True)
def no_trigger_settle(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trigger's settle time (a workaround for an Airflow scheduler race) is its own story, told in
    tests/unit/triggers/test_training_job_settle.py; every other story sees events when they happen."""
    if "trigger_settle" in request.keywords:
        return
    from airflow_provider_disttrain.triggers import training_job

    monkeypatch.setattr(training_job, "SETTLE_SECONDS", 0.0)


def fixture_path(relative: str) -> Path:
    """Path of a file under ``tests/fixtures``, e.g. ``fixture_path("manifests/pytorchjob.yaml")``."""
    path = FIXTURES_DIR / relative
    if not path.is_file():
        raise FileNotFoundError(f"no fixture file {relative!r} under {FIXTURES_DIR}")
    return path


def read_yaml(relative: str) -> dict[str, Any]:
    """A fresh dict from a fixture file (each call parses again, so tests may mutate the result)."""
    return yaml.load(fixture_path(relative).read_text(), Loader=_ApiServerLoader)


@pytest.fixture
def load_yaml() -> Callable[[str], dict[str, Any]]:
    """``load_yaml("manifests/pytorchjob.yaml")``: a fixture file as a fresh dict."""
    return read_yaml


@pytest.fixture
def fixture_file() -> Callable[[str], Path]:
    """``fixture_file("manifests/mpijob.yaml")``: the path of a fixture file."""
    return fixture_path


@pytest.fixture
async def virtual_clock() -> AsyncIterator[LoopClock]:
    """Virtual time for the test: the event loop's clock, fast-forwarded by ``looptime``.

    Whenever every task waits (a sleep, a timeout, a deadline) and no I/O is ready, the loop jumps to
    its next timer instead of sleeping, so a 300 s deadline passes in microseconds and in order. The
    provider's code reads the clock through ``airflow_provider_disttrain.utils.clock.current()``, which this
    fixture makes a ``LoopClock`` of the test's loop: ``wall()`` (epoch seconds, for deadlines),
    ``monotonic()`` and ``sleep()`` all follow the virtual time. Assert on durations with
    ``virtual_clock.monotonic()`` (exact: no scheduling noise), and make deadlines with
    ``tests.unit.fakes.epoch(offset)``, which reads the same clock. Real I/O (the loopback API server,
    a subprocess) still takes its real time; the loop never jumps while it is ready.
    """
    loop = asyncio.get_running_loop()
    assert isinstance(loop, asyncio.BaseEventLoop)
    patched = looptime.patch_event_loop(loop)  # a no-op where the looptime plugin patched it already
    # Virtual time goes on from the loop's real time, so timers set before keep their order. The loop
    # polls its sockets this many times before it jumps: on a loaded machine the kernel may deliver a
    # loopback write to the other end a moment late, and the jump must not overtake it.
    patched.setup_looptime(start=loop.time(), noop_cycles=200, resolution=_LOOPTIME_RESOLUTION)
    # Real time never stands still: a wait of any length takes at least one tick of the virtual clock.
    # Without this, a timer a hair ahead of the clock (a deadline summed from floats, e.g. a watch's
    # next bookmark at start + k * 0.2, 2e-13 s ahead) runs at once within asyncio's clock resolution
    # without the clock moving, and a loop "while now < deadline: wait(deadline - now)" spins at 100 %
    # CPU forever (it hung the unit suite on some days: it depends on the float values of the machine's
    # monotonic clock).
    selector = loop._selector  # type: ignore[attr-defined]
    looptime_select, loop_call_at = selector.select, loop.call_at
    selector.select = _never_shorter_than_a_tick(looptime_select)

    def call_at_least_a_tick_ahead(when: float, callback: Any, *args: Any, context: Any = None) -> Any:
        now = loop.time()
        return loop_call_at(
            max(when, now + _LOOPTIME_RESOLUTION) if when > now else when, callback, *args, context=context
        )

    loop.call_at = call_at_least_a_tick_ahead  # type: ignore[method-assign]
    try:
        with patched.looptime_enabled(), clock.installed(LoopClock(loop), loop) as virtual:
            yield virtual
    finally:
        selector.select = looptime_select
        del loop.call_at  # the class's again


_LOOPTIME_RESOLUTION = 1e-6


def _never_shorter_than_a_tick(select: Callable[[float | None], Any]) -> Callable[[float | None], Any]:
    """looptime moves its clock in whole ticks (``resolution``), rounding the loop's select timeout to
    the nearest one, so a wait for a timer less than half a tick ahead would not move it at all."""

    def select_at_least_one_tick(timeout: float | None = None) -> Any:
        if timeout is not None and 0 < timeout < _LOOPTIME_RESOLUTION:
            timeout = _LOOPTIME_RESOLUTION
        return select(timeout)

    return select_at_least_one_tick


@pytest.fixture
async def apiserver(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fake Kubernetes API server on loopback (``tests/unit/fake_apiserver.py``), with short lingers.

    On the test's clock: a test module that uses ``virtual_clock`` (``pytestmark =
    pytest.mark.usefixtures("virtual_clock")``, set up before this fixture) gets a server whose watch
    timeouts and bookmarks are virtual too."""
    from airflow_provider_disttrain.hooks import shared_watch
    from tests.unit.fake_apiserver import FakeApiServer

    monkeypatch.setattr(shared_watch, "LINGER_SECONDS", 0.05)
    server = FakeApiServer(clock.current())
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def statsd(monkeypatch: pytest.MonkeyPatch) -> Iterator[StatsdListener]:
    """A StatsD server on loopback that Airflow's Stats sends to, as ``[metrics]`` set in the environment."""
    listener = StatsdListener()
    for option, value in {"STATSD_ON": "True", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(listener.port)}.items():
        monkeypatch.setenv(f"AIRFLOW__METRICS__{option}", value)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", STATSD_PREFIX)
    # The provider initialises Airflow's Stats once per process: again for this test, and after it.
    monkeypatch.setattr(telemetry, "_initialised_in", None)
    monkeypatch.setattr(telemetry, "census", telemetry.JobCensus())
    yield listener
    telemetry._initialised_in = None
    listener.close()
