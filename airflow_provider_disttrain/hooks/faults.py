"""The wait's fault model: what the shared watch and the trigger do with each error they can meet.

One pure function, ``classify``, maps an error to a ``Fault`` (what to do next); the watch loop and the
trigger's reads act on it, and ``tests/unit/hooks/test_faults.py`` holds the table. The rule: every
error that may heal by itself is retried with backoff for as long as the trigger's
``api_failure_tolerance`` allows, and is then reported; only what cannot heal is fatal at once: the
resource type is not served (404 of the collection: the CRD is not installed), the request is
malformed (400, 405, 406, 415, 422), or a local file or certificate is wrong. A 403 is the exception in
between: final on first contact (the Role lacks the verbs), waited out for a short grace once access
worked (a restarted API server refuses until its RBAC caches sync) - the trigger decides which, since
only it knows whether access ever worked. A deleted job is not an error at all: the watch reports it
(a DELETED event or a tombstone after a relist) and the trigger ends with an error event.

Errors come from three layers, each with its own types:
- the API server's answer: ``kubernetes_asyncio``'s ``ApiException`` with ``.status`` (also raised for an
  in-stream ``ERROR`` event, with the Status' ``code``);
- the connection: aiohttp's ``ClientError`` family (``ClientConnectorError``, ``ServerDisconnectedError``,
  ``ClientPayloadError`` when a chunked stream is cut), ``asyncio.TimeoutError`` (the client's total
  timeout, the watch's silence watchdog), ``ConnectionError``/``OSError``;
- the credentials: a kubeconfig exec plugin that failed or hung (``CredentialsUnavailable`` from the
  cluster client, a ``ConnectionError``; before that wrapper, kubernetes_asyncio's ``ConfigException``
  "exec: process returned N"), and garbled output of a stream: ``json.JSONDecodeError`` when a watch
  stream ends in the middle of an event line.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from airflow_provider_disttrain.hooks.api_errors import api_status, error_class, is_plugin_failure, may_heal_unanswered

# error_class lives with the hooks' retry, which counts with it; the wait's readers take it from here too.
__all__ = ["FATAL_STATUSES", "RETRIED_STATUSES", "Action", "Fault", "classify", "error_class"]


class Action(enum.Enum):
    RETRY = "retry"
    """An outage that may heal: retry with backoff; an error once it lasted ``api_failure_tolerance``."""
    RELIST = "relist"
    """410 Gone: the resourceVersion is older than the server keeps; list again, watch from there."""
    RENEW = "renew"
    """401: rebuild the client (re-runs the exec plugin, re-reads the token file) and retry once at
    once; a 401 that the renewed client also gets is reported as bad credentials."""
    DENIED = "denied"
    """403: final on first contact, waited out for a grace after access worked."""
    FATAL = "fatal"
    """Cannot heal: report at once."""


@dataclass(frozen=True)
class Fault:
    action: Action
    status: int | None
    """The HTTP status of the answer (None: no answer reached us)."""

    @property
    def retried(self) -> bool:
        return self.action in (Action.RETRY, Action.RELIST, Action.RENEW)


RETRIED_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
"""Answers of an overloaded or restarting server, or of a proxy in front of it."""
FATAL_STATUSES = frozenset({400, 404, 405, 406, 415, 422})
"""A malformed request, or a resource type the server does not serve: the same on every attempt."""


def classify(error: BaseException) -> Fault:
    """What the wait does about ``error`` (see the module docstring and docs/guides/deferral.md, "The fault model")."""
    status = api_status(error)
    if status is not None:
        if status == 410:
            return Fault(Action.RELIST, status)
        if status == 401:
            return Fault(Action.RENEW, status)
        if status == 403:
            return Fault(Action.DENIED, status)
        if status in RETRIED_STATUSES or (status >= 500 and status not in (501, 505)):
            return Fault(Action.RETRY, status)
        return Fault(Action.FATAL, status)
    if isinstance(error, json.JSONDecodeError) or is_plugin_failure(error):
        # A watch stream that ended in the middle of an event line; a credential plugin that failed.
        return Fault(Action.RETRY, None)
    # No answer reached us: the hooks' shared rule says whether it may heal.
    return Fault(Action.RETRY if may_heal_unanswered(error) else Action.FATAL, None)
