"""Shared fixtures of the unit tests: real manifests, job status objects and pods as YAML files, a
virtual clock, and a fake API server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import looptime
import pytest
import yaml

from airflow_provider_disttrain import clock
from airflow_provider_disttrain.clock import LoopClock

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"


class _ApiServerLoader(yaml.SafeLoader):
    """A YAML loader that reads objects the way they arrive from the API server (JSON).

    Timestamps stay strings, as in the API's JSON, instead of becoming ``datetime`` objects.
    """


_ApiServerLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


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
    provider's code reads the clock through ``airflow_provider_disttrain.clock.current()``, which this
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
    patched.setup_looptime(start=loop.time(), noop_cycles=200)
    with patched.looptime_enabled(), clock.installed(LoopClock(loop), loop) as virtual:
        yield virtual


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
