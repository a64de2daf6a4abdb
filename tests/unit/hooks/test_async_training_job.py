"""``AsyncJobClient`` against a fake of kubernetes_asyncio's ``CustomObjectsApi``.

The fake answers the list call of a watch with a streamed HTTP body (one JSON event per line), so the
real ``kubernetes_asyncio.watch.Watch`` parses it, as it parses the API server's.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import tenacity
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_provider_disttrain.hooks import async_training_job
from airflow_provider_disttrain.hooks.async_training_job import AsyncJobClient, AsyncTrainingJobHook
from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
from airflow_provider_disttrain.kinds import get_job_kind
from tests.unit.fakes import make_job, running_status, succeeded_status

PYTORCH = get_job_kind("PyTorchJob")


class FakeStreamContent:
    def __init__(self, lines: list[bytes]) -> None:
        self.lines = list(lines)

    async def readline(self) -> bytes:
        return self.lines.pop(0) if self.lines else b""  # b"": the server ended the watch


class FakeStreamResponse:
    def __init__(self, lines: list[bytes]) -> None:
        self.content = FakeStreamContent(lines)
        self.released = False

    def close(self) -> None:
        self.released = True

    def release(self) -> None:
        self.released = True


class FakeAsyncCustomObjectsApi:
    """The three calls ``AsyncJobClient`` makes; each answer is a value or an exception to raise."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.get_answers: list[Any] = []
        self.delete_answers: list[Any] = []
        self.watch_lines: list[bytes] = []
        self.responses: list[FakeStreamResponse] = []

    @staticmethod
    def _answer(answers: list[Any]) -> Any:
        answer = answers.pop(0) if answers else {}
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def get_namespaced_custom_object(self, **kwargs: Any) -> Any:
        self.calls.append(("get", (), kwargs))
        return self._answer(self.get_answers)

    async def delete_namespaced_custom_object(self, **kwargs: Any) -> Any:
        self.calls.append(("delete", (), kwargs))
        return self._answer(self.delete_answers)

    async def list_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
        """List or watch custom objects (no typed model: events carry plain dicts)."""
        self.calls.append(("list", args, kwargs))
        response = FakeStreamResponse(self.watch_lines)
        self.responses.append(response)
        return response


def event_line(event_type: str, obj: dict[str, Any]) -> bytes:
    return (json.dumps({"type": event_type, "object": obj}) + "\n").encode()


@pytest.fixture(autouse=True)
def no_retry_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    for attribute in vars(AsyncJobClient).values():
        retrying = getattr(attribute, "retry", None)
        if isinstance(retrying, tenacity.BaseRetrying):
            monkeypatch.setattr(retrying, "wait", tenacity.wait_none())


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeAsyncCustomObjectsApi:
    fake = FakeAsyncCustomObjectsApi()
    monkeypatch.setattr(async_training_job.async_client, "CustomObjectsApi", lambda api_client: fake)
    return fake


@pytest.fixture
def jobs(api: FakeAsyncCustomObjectsApi) -> AsyncJobClient:
    return AsyncJobClient(api_client=object())


async def test_get_job_reads_the_named_object(jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi) -> None:
    job = make_job(namespace="ml")
    api.get_answers = [job]

    assert await jobs.get_job(PYTORCH, "train-abc", "ml") == job
    assert api.calls == [
        (
            "get",
            (),
            {"group": "kubeflow.org", "version": "v1", "namespace": "ml", "plural": "pytorchjobs", "name": "train-abc"},
        )
    ]


async def test_get_job_not_found_is_none(jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi) -> None:
    api.get_answers = [ApiException(status=404, reason="Not Found")]

    assert await jobs.get_job(PYTORCH, "gone", "ml") is None


async def test_get_job_retries_a_transient_error(jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi) -> None:
    job = make_job()
    api.get_answers = [ApiException(status=503), ConnectionResetError("reset"), job]

    assert await jobs.get_job(PYTORCH, "train-abc", "default") == job
    assert len(api.calls) == 3


async def test_get_job_passes_a_refusal_on_to_the_trigger(jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi) -> None:
    api.get_answers = [ApiException(status=403, reason="Forbidden")]

    with pytest.raises(ApiException) as raised:
        await jobs.get_job(PYTORCH, "train-abc", "ml")
    assert raised.value.status == 403
    assert len(api.calls) == 1


async def test_delete_job_with_uid_sends_a_precondition(jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi) -> None:
    assert await jobs.delete_job(PYTORCH, "train-abc", "ml", uid="uid-1") is True

    assert api.calls == [
        (
            "delete",
            (),
            {
                "group": "kubeflow.org",
                "version": "v1",
                "namespace": "ml",
                "plural": "pytorchjobs",
                "name": "train-abc",
                "body": {"propagationPolicy": "Background", "preconditions": {"uid": "uid-1"}},
            },
        )
    ]


async def test_delete_job_without_uid_sends_no_precondition(
    jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi
) -> None:
    await jobs.delete_job(PYTORCH, "train-abc", "ml")

    assert api.calls[0][2]["body"] == {"propagationPolicy": "Background"}


@pytest.mark.parametrize("status", [404, 409], ids=["already-gone", "uid-precondition-failed"])
async def test_delete_job_of_a_missing_or_replaced_job_is_false(
    jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi, status: int
) -> None:
    api.delete_answers = [ApiException(status=status)]

    assert await jobs.delete_job(PYTORCH, "train-abc", "ml", uid="uid-1") is False


async def test_watch_job_yields_event_types_and_raw_objects(
    jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi
) -> None:
    running = make_job(namespace="ml", status=running_status(), resource_version="101")
    done = make_job(namespace="ml", status=succeeded_status(), resource_version="102")
    bookmark = {"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1", "metadata": {"resourceVersion": "103"}}
    api.watch_lines = [event_line("MODIFIED", running), event_line("MODIFIED", done), event_line("BOOKMARK", bookmark)]

    events = [
        event async for event in jobs.watch_job(PYTORCH, "train-abc", "ml", resource_version="100", timeout_seconds=30)
    ]

    assert events == [("MODIFIED", running), ("MODIFIED", done), ("BOOKMARK", bookmark)]
    [(_, args, kwargs)] = api.calls
    assert args == ("kubeflow.org", "v1", "ml", "pytorchjobs")
    assert kwargs == {
        "field_selector": "metadata.name=train-abc",
        "timeout_seconds": 30,
        "allow_watch_bookmarks": True,
        "resource_version": "100",
        "watch": True,
        "_preload_content": False,
    }
    assert api.responses[0].released


async def test_watch_job_without_resource_version_starts_from_now(
    jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi
) -> None:
    events = [e async for e in jobs.watch_job(PYTORCH, "train-abc", "ml", resource_version=None, timeout_seconds=5)]

    assert events == []
    assert "resource_version" not in api.calls[0][2]


async def test_watch_job_raises_410_gone_for_a_stale_resource_version(
    jobs: AsyncJobClient, api: FakeAsyncCustomObjectsApi
) -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 100 (2000)"}
    api.watch_lines = [event_line("ERROR", gone)]

    with pytest.raises(ApiException) as raised:
        async for _ in jobs.watch_job(PYTORCH, "train-abc", "ml", resource_version="100", timeout_seconds=30):
            pass
    assert raised.value.status == 410
    # The trigger relists; the watch itself does not silently retry.
    assert len(api.calls) == 1


async def test_job_client_opens_one_connection_for_its_life(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[object] = []

    @contextlib.asynccontextmanager
    async def get_conn(self: Any) -> AsyncIterator[object]:
        api_client = object()
        opened.append(api_client)
        yield api_client

    monkeypatch.setattr(AsyncTrainingJobHook, "get_conn", get_conn)
    hook = AsyncTrainingJobHook(conn_id="kubernetes_default")

    async with hook.job_client() as jobs:
        assert isinstance(jobs, AsyncJobClient)
        assert jobs._custom.api_client is opened[0]
    assert len(opened) == 1


KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443"}}],
    "users": [{"name": "u", "user": {"token": "t0ken-abcdef"}}],
    "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
    "current-context": "ctx",
}


@pytest.mark.parametrize("prefix", ["", "extra__kubernetes__"], ids=["extras", "legacy-prefixed-extras"])
async def test_the_shipped_connection_args_configure_the_async_hook(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, prefix: str
) -> None:
    """What the task ships for a kubeconfig file configures the triggerer's hook (without the file)."""
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    extra = {f"{prefix}kube_config_path": str(path), f"{prefix}namespace": "ml"}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_SHIPPED", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    args = TrainingJobHook(conn_id="k8s_shipped").trigger_connection_args()
    path.unlink()  # the triggerer does not have the file

    hook = AsyncTrainingJobHook(
        conn_id=args["kubernetes_conn_id"],
        cluster_context=args["cluster_context"],
        config_dict=args["config_dict"],
        connection_extras=args["connection_extras"],
    )
    async with hook.get_conn() as api_client:
        assert api_client.configuration.host == "https://10.0.0.1:6443"
