"""Bursts of trigger work spread over turns of the triggerer's event loop.

Every trigger of a triggerer runs on one event loop, and asyncio runs, in one turn, every callback that
became ready during the previous one, before it looks at its timers or its sockets again. A triggerer
that starts 1,000 training triggers at once (a restart, a takeover), or a shared watch that wakes the
1,000 subscribers of its first LIST, makes 1,000 triggers ready in the same turn: each does a little
(judge the job, a progress line, telemetry), and the turn holds the loop for the sum - about a second
at 1,000, quadratic in what each step touched - while every other trigger of the process, other
providers' included, waits (Airflow warns at 0.2 s).

``Pacer`` lets at most ``per_turn`` of them go in one turn and the rest in the following turns, in the
order they came: the burst is still served within a few hundredths of a second per hundred triggers,
but no turn holds the loop for more than ``per_turn`` triggers' work. A lone wake-up (one job changed)
goes through at once, as before. No library fits: asyncio's semaphores bound concurrency, not how many
tasks become ready in one turn, and rate limiters (aiolimiter) pace by wall time, which would delay a
quiet loop for nothing.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

WAKES_PER_TURN = 50
"""Wake-ups (a trigger starting, a subscriber notified) let through in one turn of the loop. A trigger's
step after a wake-up costs about a millisecond at most (the scale benchmark's 1,000 triggers): 50 keep a
turn near 50 ms, well under Airflow's 0.2 s warning, and 1,000 triggers are all served in 20 turns."""


class Pacer:
    """At most ``per_turn`` wake-ups per turn of ``loop``; the others wait for the next turns, in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, per_turn: int | None = None) -> None:
        self._loop = loop
        self.per_turn = WAKES_PER_TURN if per_turn is None else per_turn
        self._used = 0  # wake-ups let through in the current turn
        # In arrival order; a subscriber notified twice before its turn is woken once. Bounded by the
        # waiters that exist (each holds at most one place).
        self._waiting: dict[Callable[[], None], None] = {}
        self._turn_scheduled = False

    def __len__(self) -> int:
        return len(self._waiting)

    def call(self, wake: Callable[[], None]) -> None:
        """``wake()`` now if this turn has room (and nobody waits before it), else in a later turn."""
        self._schedule_turn()
        if self._used < self.per_turn and not self._waiting:
            self._used += 1
            wake()
        else:
            self._waiting[wake] = None

    async def turn(self) -> None:
        """Return in this turn if it has room, else once a later turn lets this caller go."""
        future: asyncio.Future[None] = self._loop.create_future()

        def release() -> None:
            if not future.done():  # a caller cancelled meanwhile just loses its place
                future.set_result(None)

        self.call(release)
        await future

    def _schedule_turn(self) -> None:
        if not self._turn_scheduled:
            self._turn_scheduled = True
            # Scheduled now, it runs in the next turn: that turn's budget starts then.
            self._loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._turn_scheduled = False
        self._used = 0
        while self._waiting and self._used < self.per_turn:
            wake = next(iter(self._waiting))
            del self._waiting[wake]
            self._used += 1
            wake()
        if self._waiting or self._used:
            self._schedule_turn()


_pacers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer] = weakref.WeakKeyDictionary()


def pacer() -> Pacer:
    """The running event loop's pacer (one per triggerer loop, shared by every watch and trigger)."""
    loop = asyncio.get_running_loop()
    if loop not in _pacers:
        _pacers[loop] = Pacer(loop)
    return _pacers[loop]
