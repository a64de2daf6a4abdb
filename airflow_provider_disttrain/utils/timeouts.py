"""Bounded waits in the triggerer's event loop that never swallow a cancellation.

``asyncio.wait_for`` before Python 3.12 runs what it awaits as a task of its own, and when that task
finishes in the same turn of the loop in which the waiting task is cancelled, it returns the result and
drops the cancellation (CPython gh-86296; 3.12 rebuilt ``wait_for`` on ``asyncio.timeout``). A watch
loop cancelled as an event line arrived then read on for good, and the trigger waiting for it to end
never sent its event: seen on the local two-cluster environment, a MultiKueue job's worker-pod watch
cancelled as the pods' deletion events came, and the deferred task waited forever after its job had
succeeded. ``within`` (``asyncio.timeout`` from 3.11, its backport ``async_timeout`` on 3.10, which
aiohttp already depends on there) cancels the waiting task itself, so a cancellation from outside is
never lost; the package uses it instead of ``asyncio.wait_for``.

``cancel_and_wait`` bounds how long an ending trigger waits for the helper tasks it cancels: the event
must go out even if one of them (a library's code, say) does not end when cancelled.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

if sys.version_info >= (3, 11):
    from asyncio import timeout as within
else:  # pragma: no cover - the 3.10 backport, same semantics
    from async_timeout import timeout as within  # type: ignore[import-not-found, no-redef]

__all__ = ["STOP_SECONDS", "cancel_and_wait", "next_line", "within"]

# How long an ending trigger waits for a cancelled helper task (a log stream, a pod watch) to end: a
# cancelled task normally ends in the next turn of the loop; this only bounds a misbehaving one.
STOP_SECONDS = 10.0


async def cancel_and_wait(task: asyncio.Task[Any], what: str, log: Any, seconds: float = STOP_SECONDS) -> bool:
    """Cancel ``task`` (``what`` it does, for the log) and wait up to ``seconds`` for it to end; whether it
    ended. One that did not is left behind with a warning, so that the caller's own ending goes on."""
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        log.warning("%s did not stop within %gs of being cancelled; left behind", what, seconds)
    return bool(done)


async def next_line(stream: Any, seconds: float) -> bytes:
    """The next line of a streamed response (aiohttp's ``response.content``); ``b""`` at its end, and
    ``TimeoutError`` after ``seconds`` without one (a watch the server holds open but no longer feeds)."""
    async with within(seconds):
        line: bytes = await stream.readline()
    return line
