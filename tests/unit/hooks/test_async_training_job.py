"""``AsyncJobClient`` against a fake of kubernetes_asyncio's ``CustomObjectsApi``; the hook's config.

Watching is the shared watch's (``tests/unit/hooks/test_shared_watch.py``, against a fake API server).
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
from airflow_provider_disttrain.job.kinds import get_job_kind
from tests.unit.fakes import make_job

PYTORCH = get_job_kind("PyTorchJob")


class FakeAsyncCustomObjectsApi:
    """The two calls ``AsyncJobClient`` makes; each answer is a value or an exception to raise."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.get_answers: list[Any] = []
        self.delete_answers: list[Any] = []

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
async def test_the_shipped_connection_configures_the_async_hook(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, prefix: str
) -> None:
    """What the task ships for a kubeconfig file configures the triggerer's hook (without the file)."""
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    extra = {f"{prefix}kube_config_path": str(path), f"{prefix}namespace": "ml"}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_SHIPPED", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    shipped = TrainingJobHook(conn_id="k8s_shipped").trigger_connection()
    path.unlink()  # the triggerer does not have the file

    async with AsyncTrainingJobHook.for_connection(shipped).get_conn() as api_client:
        assert api_client.configuration.host == "https://10.0.0.1:6443"


async def test_an_id_only_connection_is_read_in_the_triggerer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing of the credentials travelled: the triggerer's hook reads them from the Airflow connection."""
    extra = {"kube_config": json.dumps(KUBECONFIG), "namespace": "ml"}
    monkeypatch.setenv("AIRFLOW_CONN_K8S_INLINE", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    travelling = TrainingJobHook(conn_id="k8s_inline").trigger_connection()
    assert travelling.kubeconfig is None and travelling.extras is None

    async with AsyncTrainingJobHook.for_connection(travelling).get_conn() as api_client:
        assert api_client.configuration.host == "https://10.0.0.1:6443"
        assert api_client.configuration.api_key["BearerToken"] == "Bearer t0ken-abcdef"
