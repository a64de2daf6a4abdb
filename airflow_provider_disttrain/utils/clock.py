"""The one clock the provider reads: wall time, monotonic time and sleeping (sync and async), in one
injectable value.

The trigger and the worker's poll judge deadlines in epoch seconds (``wall``), the shared watch and the
Kueue position readers measure how long a request lived or when to ask again (``monotonic``), the
worker's poll waits by blocking (``sleep_sync``) and the triggerer's loop by awaiting (``sleep``). They
read one ``Clock`` instead of ``time.time()``/``time.monotonic()``/``time.sleep``/``asyncio.sleep``
directly, so a test runs them on one fake clock and drives time instead of sleeping.

The clock is chosen per event loop (``current()``): the triggerer runs every trigger in one loop, and
the shared watches of that loop serve all of them, so they must agree on what time it is. Production
code never installs one: ``SYSTEM`` is the default. ``LoopClock`` derives both times from the event
loop's own ``loop.time()``; on a loop whose time is virtual (the tests use ``looptime``, which
fast-forwards the loop to its next timer whenever it is idle) it makes the wall clock virtual too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Iterator
from typing import Protocol


class Clock(Protocol):
    def wall(self) -> float:
        """Epoch seconds (deadlines are absolute epoch seconds, set by the worker)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps, for durations."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (the event loop runs meanwhile)."""

    def sleep_sync(self, seconds: float) -> None:
        """Block the thread ``seconds`` (a worker's sync wait)."""


class SystemClock:
    """The operating system's clocks and the event loop's sleep."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def sleep_sync(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM: Clock = SystemClock()


class LoopClock:
    """Time as an event loop tells it: ``monotonic`` is ``loop.time()``; ``wall`` is the epoch time at
    creation plus the loop time elapsed since, so both move together (both virtual on a virtual loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, epoch_at_start: float | None = None) -> None:
        self._loop = loop
        self._loop_at_start = loop.time()
        self._epoch_at_start = time.time() if epoch_at_start is None else epoch_at_start

    def wall(self) -> float:
        return self._epoch_at_start + (self._loop.time() - self._loop_at_start)

    def monotonic(self) -> float:
        return self._loop.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def sleep_sync(self, seconds: float) -> None:
        time.sleep(seconds)  # the loop's time cannot be moved from outside it: only real time passes


_installed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Clock] = weakref.WeakKeyDictionary()


def current() -> Clock:
    """The clock of the running event loop (``SYSTEM`` unless one was installed, or outside a loop)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return SYSTEM
    return _installed.get(loop, SYSTEM)


@contextlib.contextmanager
def installed(clock: Clock, loop: asyncio.AbstractEventLoop) -> Iterator[Clock]:
    """Make ``clock`` the clock of ``loop`` for the length of the block."""
    previous = _installed.get(loop)
    _installed[loop] = clock
    try:
        yield clock
    finally:
        if previous is None:
            _installed.pop(loop, None)
        else:
            _installed[loop] = previous
