"""The wait's fault model as a table: each error the shared watch and the trigger can meet, and what
they do about it. The errors are built as the real libraries raise them (kubernetes_asyncio's
``ApiException`` and ``ConfigException``, aiohttp's client errors, the cluster client's
``CredentialsUnavailable``, json's decode error of a line cut short)."""

from __future__ import annotations

import asyncio
import json
import ssl

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from airflow_provider_disttrain.hooks.cluster_client import CredentialsUnavailable
from airflow_provider_disttrain.hooks.faults import Action, classify, error_class


def api(status: int) -> ApiException:
    return ApiException(status=status, reason="injected")


def cut_line() -> json.JSONDecodeError:
    try:
        json.loads('{"type": "MODIFIED", "object": {"metadata": {"name"')
    except json.JSONDecodeError as error:
        return error
    raise AssertionError("unreachable")


def connector_error() -> aiohttp.ClientConnectorError:
    key = ConnectionKey("127.0.0.1", 6443, True, True, None, None, None)
    return aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "Connection refused"))


def plugin_failure_wrapped() -> BaseException:
    """As the cluster client raises it: ``raise CredentialsUnavailable(...) from error``."""
    cause = ConfigException("exec: process returned 1")
    try:
        raise CredentialsUnavailable("plugin failed", cause) from cause
    except CredentialsUnavailable as error:
        return error


TABLE = [
    # The API server's answers.
    ("410 Gone (too old resourceVersion)", api(410), Action.RELIST),
    ("401 Unauthorized (expired token)", api(401), Action.RENEW),
    ("403 Forbidden", api(403), Action.DENIED),
    ("404 of the collection (CRD not installed)", api(404), Action.FATAL),
    ("400 Bad Request", api(400), Action.FATAL),
    ("422 Unprocessable", api(422), Action.FATAL),
    ("405 Method Not Allowed", api(405), Action.FATAL),
    ("408 Request Timeout", api(408), Action.RETRY),
    ("429 Too Many Requests", api(429), Action.RETRY),
    ("500 Internal Server Error", api(500), Action.RETRY),
    ("502 Bad Gateway", api(502), Action.RETRY),
    ("503 Service Unavailable", api(503), Action.RETRY),
    ("504 Gateway Timeout", api(504), Action.RETRY),
    ("507 (any other 5xx)", api(507), Action.RETRY),
    ("501 Not Implemented", api(501), Action.FATAL),
    # The connection.
    ("connection refused", connector_error(), Action.RETRY),
    ("server disconnected", aiohttp.ServerDisconnectedError(), Action.RETRY),
    ("chunked stream cut", aiohttp.ClientPayloadError("Response payload is not completed"), Action.RETRY),
    ("connection reset", aiohttp.ClientOSError(104, "Connection reset by peer"), Action.RETRY),
    ("read timeout", aiohttp.ServerTimeoutError("Timeout on reading data from socket"), Action.RETRY),
    ("client total timeout / silence watchdog", asyncio.TimeoutError(), Action.RETRY),
    ("OS-level timeout", TimeoutError(), Action.RETRY),
    ("ConnectionResetError", ConnectionResetError(), Action.RETRY),
    ("a watch line cut in the middle", cut_line(), Action.RETRY),
    # The credentials.
    ("exec plugin failed once", ConfigException("exec: process returned 1. throttled"), Action.RETRY),
    ("exec plugin printed garbage", ConfigException("exec: failed to decode process output: x"), Action.RETRY),
    (
        "exec plugin failed, wrapped by the cluster client",
        plugin_failure_wrapped(),
        Action.RETRY,
    ),
    ("exec plugin hung, wrapped by the cluster client", CredentialsUnavailable("plugin timed out"), Action.RETRY),
    ("exec plugin command missing", FileNotFoundError(2, "No such file", "aws"), Action.FATAL),
    ("malformed exec section", ConfigException("exec: malformed response. missing key 'status'"), Action.FATAL),
    ("kubeconfig file missing", FileNotFoundError(2, "No such file", "/kube/config"), Action.FATAL),
    (
        "certificate not trusted",
        aiohttp.ClientConnectorCertificateError(
            ConnectionKey("127.0.0.1", 6443, True, True, None, None, None),
            ssl.SSLCertVerificationError("certificate verify failed"),
        ),
        Action.FATAL,
    ),
    ("malformed server address", aiohttp.InvalidURL("http://[::1"), Action.FATAL),
    ("a bug", KeyError("metadata"), Action.FATAL),
]


@pytest.mark.parametrize(("error", "action"), [(e, a) for _, e, a in TABLE], ids=[name for name, _, _ in TABLE])
def test_each_error_has_one_action(error: BaseException, action: Action) -> None:
    fault = classify(error)

    assert fault.action is action
    assert fault.retried == (action in (Action.RETRY, Action.RELIST, Action.RENEW))


# The class each error of the table is counted under in the metrics (telemetry: disttrain.api_errors.<class>).
ERROR_CLASSES = {
    "410 Gone (too old resourceVersion)": "expired",
    "401 Unauthorized (expired token)": "unauthorized",
    "403 Forbidden": "forbidden",
    "404 of the collection (CRD not installed)": "client",
    "400 Bad Request": "client",
    "422 Unprocessable": "client",
    "405 Method Not Allowed": "client",
    "408 Request Timeout": "server",
    "429 Too Many Requests": "throttled",
    "500 Internal Server Error": "server",
    "502 Bad Gateway": "server",
    "503 Service Unavailable": "server",
    "504 Gateway Timeout": "server",
    "507 (any other 5xx)": "server",
    "501 Not Implemented": "server",
    "connection refused": "connection",
    "server disconnected": "connection",
    "chunked stream cut": "connection",
    "connection reset": "connection",
    "read timeout": "connection",
    "client total timeout / silence watchdog": "connection",
    "OS-level timeout": "connection",
    "ConnectionResetError": "connection",
    "a watch line cut in the middle": "stream",
    "exec plugin failed once": "credentials",
    "exec plugin printed garbage": "credentials",
    "exec plugin failed, wrapped by the cluster client": "credentials",
    "exec plugin hung, wrapped by the cluster client": "credentials",
    "exec plugin command missing": "local",
    "malformed exec section": "local",
    "kubeconfig file missing": "local",
    "certificate not trusted": "local",
    "malformed server address": "local",
    "a bug": "local",
}


def test_the_table_gives_each_error_a_metric_class() -> None:
    assert [name for name, _, _ in TABLE] == list(ERROR_CLASSES)


@pytest.mark.parametrize(
    ("error", "expected"), [(e, ERROR_CLASSES[n]) for n, e, _ in TABLE], ids=[name for name, _, _ in TABLE]
)
def test_each_error_is_counted_under_one_class(error: BaseException, expected: str) -> None:
    assert error_class(error) == expected


def test_the_status_travels_with_the_fault() -> None:
    assert classify(api(503)).status == 503
    assert classify(asyncio.TimeoutError()).status is None
