"""Which API failures are worth retrying, and how they read in a message."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_provider_disttrain.hooks.api_errors import describe_error, is_transient


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_overload_and_server_errors_are_transient_for_both_clients(status):
    assert is_transient(ApiException(status=status))
    assert is_transient(AsyncApiException(status=status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422])
def test_client_errors_are_not_retried(status):
    assert not is_transient(ApiException(status=status))


@pytest.mark.parametrize(
    "error", [ConnectionRefusedError("refused"), ConnectionResetError("reset"), asyncio.TimeoutError()]
)
def test_connection_failures_are_transient(error):
    assert is_transient(error)


def test_a_programming_error_is_not_transient():
    assert not is_transient(KeyError("status"))


def test_describe_error_names_status_reason_and_body():
    error = ApiException(status=404, reason="Not Found")
    error.body = '{"kind":"Status","message":"pytorchjobs.kubeflow.org \\"x\\" not found"}'

    text = describe_error(error)

    assert text.startswith("HTTP 404 Not Found: ")
    assert 'pytorchjobs.kubeflow.org \\"x\\" not found' in text


def test_describe_error_of_a_plain_exception_is_its_repr():
    assert describe_error(ConnectionRefusedError("refused")) == "ConnectionRefusedError('refused')"
