"""Which API failures are worth retrying, and how they read in a message."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as sync_client
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio import client as async_client
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_provider_disttrain.hooks.api_errors import describe_error, is_transient, means_job_absent, retry_transient


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


@pytest.mark.parametrize("api_exception", [ApiException, AsyncApiException])
def test_a_missing_job_is_404_and_a_failed_uid_precondition_409_for_both_clients(api_exception):
    assert means_job_absent(api_exception(status=404))
    assert not means_job_absent(api_exception(status=409))
    assert means_job_absent(api_exception(status=409), uid_precondition=True)
    assert means_job_absent(api_exception(status=404), uid_precondition=True)
    for status in (403, 500):
        assert not means_job_absent(api_exception(status=status), uid_precondition=True)
    assert not means_job_absent(ConnectionResetError("reset"))


def test_describe_error_names_status_reason_and_body():
    error = ApiException(status=404, reason="Not Found")
    error.body = '{"kind":"Status","message":"pytorchjobs.kubeflow.org \\"x\\" not found"}'

    text = describe_error(error)

    assert text.startswith("HTTP 404 Not Found: ")
    assert 'pytorchjobs.kubeflow.org \\"x\\" not found' in text


def test_describe_error_of_a_plain_exception_is_its_repr():
    assert describe_error(ConnectionRefusedError("refused")) == "ConnectionRefusedError('refused')"


# -- errors no retry can fix: the real clients' exceptions, from a real TLS handshake ------------------------


@pytest.fixture(scope="module")
def untrusted_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``https://127.0.0.1:<port>`` presenting a self-signed certificate no client trusts."""
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    command = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -keyout {} -out {}"
    subprocess.run(command.format(key, cert).split(), check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:  # closed at teardown
                return
            with contextlib.suppress(OSError), connection:
                context.wrap_socket(connection, server_side=True).close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"https://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def sync_api(host: str, ca_file: str | None = None) -> sync_client.CoreV1Api:
    configuration = sync_client.Configuration()
    configuration.host = host
    configuration.ssl_ca_cert = ca_file
    configuration.retries = 0
    return sync_client.CoreV1Api(sync_client.ApiClient(configuration))


def raised_by(call: object) -> BaseException:
    try:
        call()  # type: ignore[operator]
    except Exception as error:
        return error
    raise AssertionError("the call did not fail")


def test_a_certificate_the_sync_client_cannot_verify_is_not_transient(untrusted_tls_server: str) -> None:
    error = raised_by(lambda: sync_api(untrusted_tls_server).list_namespaced_pod("default"))

    assert "CERTIFICATE_VERIFY_FAILED" in repr(error)
    assert not is_transient(error)


def test_a_certificate_the_async_client_cannot_verify_is_not_transient(untrusted_tls_server: str) -> None:
    async def list_pods() -> None:
        configuration = async_client.Configuration()
        configuration.host = untrusted_tls_server
        async with async_client.ApiClient(configuration) as api_client:
            await async_client.CoreV1Api(api_client).list_namespaced_pod("default")

    error = raised_by(lambda: asyncio.run(list_pods()))

    assert "certificate verify failed" in repr(error).lower()
    assert not is_transient(error)


def test_a_missing_ca_file_is_not_transient(untrusted_tls_server: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-ca.crt")
    error = raised_by(lambda: sync_api(untrusted_tls_server, missing).list_namespaced_pod("default"))

    assert "No such file" in repr(error)
    assert not is_transient(error)
    assert not is_transient(FileNotFoundError(2, "No such file or directory", missing))


def test_a_certificate_failure_is_raised_at_once_not_retried(untrusted_tls_server: str) -> None:
    attempts = []

    @retry_transient(attempts=5)
    def list_pods() -> None:
        attempts.append(1)
        sync_api(untrusted_tls_server).list_namespaced_pod("default")

    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        list_pods()
    assert len(attempts) == 1


def test_a_refused_connection_through_the_sync_client_stays_transient() -> None:
    with socket.create_server(("127.0.0.1", 0)) as reserved:
        port = reserved.getsockname()[1]
    error = raised_by(lambda: sync_api(f"https://127.0.0.1:{port}").list_namespaced_pod("default"))

    assert is_transient(error)
