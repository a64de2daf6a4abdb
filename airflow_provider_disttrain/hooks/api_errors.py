"""What the sync and async hooks share: which API errors are transient, what each status means, and
the class each error is counted under in the telemetry (``error_class``).

Both Kubernetes clients raise an ``ApiException`` with ``.status``; connection-level failures come as
urllib3 errors (sync) or aiohttp/asyncio errors (async). The retry policy is tenacity's; only the
predicate is ours, because the cncf provider's ``generic_api_retry`` also retries 409 Conflict, which
for a create means "your job already exists" and must not be retried blindly.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from collections.abc import Iterator
from typing import Any

import tenacity

from airflow_provider_disttrain.exceptions import ClusterAccessError
from airflow_provider_disttrain.utils import telemetry

TRANSIENT_STATUS_CODES = frozenset({429, 500, 502, 503, 504})
API_ATTEMPTS = 5


def delete_body(uid: str | None, propagation_policy: str = "Background") -> dict[str, Any]:
    """DeleteOptions for a job; ``uid`` as a precondition spares a same-named job created since."""
    body: dict[str, Any] = {"propagationPolicy": propagation_policy}
    if uid:
        body["preconditions"] = {"uid": uid}
    return body


def api_status(error: BaseException) -> int | None:
    """HTTP status of a Kubernetes client exception (either client), or None for other errors."""
    status = getattr(error, "status", None)
    return status if isinstance(status, int) else None


def means_job_absent(error: BaseException, *, uid_precondition: bool = False) -> bool:
    """Whether the API's answer means the object is not there to act on.

    404 Not Found always; with ``uid_precondition`` (a delete pinned to a uid) also 409 Conflict: the
    precondition failed because the name now belongs to another object, which is not ours to touch.
    """
    return api_status(error) in ((404, 409) if uid_precondition else (404,))


def describe_error(error: BaseException) -> str:
    """A readable one-liner: the clients' ``ApiException`` has an empty ``repr``."""
    status = api_status(error)
    if status is None:
        return repr(error)
    body = str(getattr(error, "body", "") or "")[:300]
    return f"HTTP {status} {getattr(error, 'reason', '') or ''}{': ' + body if body else ''}".strip()


# Errors that are the same on every attempt: a server certificate the configured CA does not vouch for,
# and a kubeconfig, CA or client certificate file that is not there. Both are OSErrors, like an outage.
_PERMANENT_ERRORS = (ssl.SSLCertVerificationError, FileNotFoundError, IsADirectoryError, NotADirectoryError)


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and what it wraps: urllib3's ``MaxRetryError.reason`` and ``SSLError(original)``,
    aiohttp's and Python's ``__cause__``/``__context__``."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        wrapped = [getattr(current, "reason", None), current.__cause__, current.__context__, *current.args]
        pending.extend(item for item in wrapped if isinstance(item, BaseException))


def is_transient(error: BaseException) -> bool:
    status = api_status(error)
    if status is not None:
        return status in TRANSIENT_STATUS_CODES
    if any(isinstance(cause, _PERMANENT_ERRORS) for cause in _causes(error)):
        return False
    # No HTTP status: the request never got an answer (refused, reset, timed out).
    return isinstance(error, (ConnectionError, TimeoutError, asyncio.TimeoutError, OSError)) or type(
        error
    ).__module__.split(".")[0] in ("urllib3", "aiohttp")


# kubernetes_asyncio's ExecProvider: the plugin ran and failed, or printed garbage; the next run may work.
_PLUGIN_FAILURES = ("exec: process returned", "exec: failed to decode")


def is_plugin_failure(error: BaseException) -> bool:
    """A kubeconfig exec plugin that failed or printed garbage (kubernetes_asyncio's ``ConfigException``)."""
    return type(error).__name__ == "ConfigException" and str(error).startswith(_PLUGIN_FAILURES)


def may_heal_unanswered(error: BaseException) -> bool:
    """Whether an error that got no answer (no HTTP status; not a cut watch stream, not a failed plugin)
    may heal by itself: refused, reset, half-open, timed out, credentials not to be had right now (the
    cluster client's CredentialsUnavailable is a ConnectionError). Not a local file or certificate that
    is wrong on every attempt (``is_transient``), nor a malformed server address (aiohttp's InvalidURL)
    or kubeconfig: a ValueError. A bug (KeyError, TypeError) cannot heal either."""
    if isinstance(error, ValueError) and not isinstance(error, OSError):
        return False
    return is_transient(error)


# Telemetry classes of the answers that carry a status (``error_class``); other 4xx are ``client``.
_STATUS_CLASSES = {410: "expired", 401: "unauthorized", 403: "forbidden", 429: "throttled", 408: "server"}


def error_class(error: BaseException) -> str:
    """The class an error is counted under in the telemetry (``telemetry.py``): what a platform team acts on.

    ``connection`` (no answer: refused, reset, timed out, a silent watch), ``stream`` (a watch stream cut
    in the middle of an event), ``credentials`` (the kubeconfig's plugin failed or hung), ``expired``
    (410: relisted), ``unauthorized`` (401), ``forbidden`` (403), ``throttled`` (429), ``server`` (5xx,
    408), ``client`` (another 4xx), ``local`` (a kubeconfig, file or certificate that is wrong).
    """
    status = api_status(error)
    if status is not None:
        return _STATUS_CLASSES.get(status) or ("server" if status >= 500 else "client")
    if isinstance(error, json.JSONDecodeError):
        return "stream"
    if is_plugin_failure(error) or type(error).__name__ == "CredentialsUnavailable":
        return "credentials"
    return "connection" if may_heal_unanswered(error) else "local"


def _counted_transient(error: BaseException) -> bool:
    """``is_transient``, counting the failed request in the telemetry on the way (tenacity asks once per
    failed attempt). A 404 or 409 is an answer the callers expect (absent, already there), not counted."""
    if api_status(error) not in (404, 409):
        telemetry.api_error(error_class(error))
    return is_transient(error)


def retry_transient(attempts: int = API_ATTEMPTS) -> Any:
    """Decorator retrying transient API failures with exponential backoff (sync or async functions)."""
    return tenacity.retry(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=0.5, max=8),
        retry=tenacity.retry_if_exception(_counted_transient),
        reraise=True,
    )


def raise_for_access(error: BaseException, what: str) -> None:
    """Turn 401/403 into ``ClusterAccessError`` naming the request; other errors pass through."""
    status = api_status(error)
    if status == 401:
        raise ClusterAccessError(f"{what}: the API server rejected the credentials (401 Unauthorized)") from error
    if status == 403:
        message = status_message(error)
        reason = getattr(error, "reason", "") or ""
        if _ADMISSION_REFUSAL.search(message):
            # Not RBAC: an admission webhook (that refused no field), a ResourceQuota, a namespace going away.
            raise ClusterAccessError(f"{what}: refused (403 {reason}) by the cluster's admission: {message}") from error
        raise ClusterAccessError(
            f"{what}: forbidden (403 {reason}); the connection's service account lacks RBAC permission "
            f"(see the Role in docs/guides/connection.md). API said: {message}"
        ) from error


# 403s that the authorizer did not send: admission (webhooks, quota, namespace lifecycle) refuses with 403 too.
_ADMISSION_REFUSAL = re.compile(r"admission webhook|exceeded quota|because it is being terminated")


def names_object(error: BaseException, name: str) -> bool:
    """Whether a 404's Status names the object ``name`` (it does not exist), rather than nothing (the
    resource type itself is unknown to the API server: its CRD is not installed)."""
    try:
        parsed = json.loads(getattr(error, "body", None) or "")
    except (TypeError, ValueError):
        return False
    return isinstance(parsed, dict) and ((parsed.get("details") or {}).get("name") == name)


def status_message(error: BaseException) -> str:
    """The ``message`` of the API server's Status body, whole (the body itself when it is not JSON)."""
    body = getattr(error, "body", None) or ""
    try:
        parsed = json.loads(body)
    except (TypeError, ValueError):
        return str(body)
    return str(parsed.get("message") or body) if isinstance(parsed, dict) else str(body)
