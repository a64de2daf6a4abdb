"""Waiting for what the code under test does asynchronously, on the test's (virtual) loop time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(predicate: Callable[[], object], within: float = 60.0, step: float = 0.01) -> None:
    """Return once ``predicate()`` holds, looking every ``step`` seconds; fail after ``within`` seconds.

    Seconds of loop time: virtual under the ``virtual_clock`` fixture, where a look costs microseconds
    of real time. Real I/O that takes real time (a subprocess) lets much loop time pass meanwhile.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {within} s of loop time")
        await asyncio.sleep(step)
