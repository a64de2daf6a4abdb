"""The sync driver of a job's pod watch (``pods.pod_watch``) through the real ``kubernetes.watch.Watch``:
it relists after a 410, says a 403 once, and keeps what it saw."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.pods import pod_watch
from airflow_provider_disttrain.pods.pod_watch import PodWatchThread
from tests.unit.fakes import FakeTrainingJobHook, make_pod
from tests.unit.operators.test_multikueue_kept_pods import _Response


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_watch, "MIN_BACKOFF_SECONDS", 0.01)


class ScriptedPods:
    """A pods API whose watch requests answer, in turn, the given lines (then nothing more)."""

    def __init__(self, *answers: list[dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.versions: list[str | None] = []
        self.done = threading.Event()

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> _Response:
        """:return: V1PodList"""
        self.versions.append(kwargs.get("resource_version"))
        if not self.answers:
            self.done.set()
            return _Response(iter(()))
        return _Response(self._lines(self.answers.pop(0)))

    @staticmethod
    def _lines(events: list[dict[str, Any]]) -> Iterator[bytes]:
        for event in events:
            yield json.dumps(event).encode() + b"\n"


def _pod(version: str, phase: str = "Running") -> dict[str, Any]:
    pod = make_pod("train", "master", 0, phase=phase)
    pod["metadata"]["resourceVersion"] = version
    return pod


def _watch(api: ScriptedPods) -> PodWatchThread:
    hook = FakeTrainingJobHook()
    hook.core_v1_client = api  # type: ignore[attr-defined]
    return PodWatchThread(hook, get_job_kind("PyTorchJob"), "train", "default", "PyTorchJob default/train").start()


def test_a_410_relists_and_the_pods_seen_are_kept() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
    api = ScriptedPods(
        [{"type": "ADDED", "object": _pod("5")}],
        [gone],
        [gone],  # (the client retries a 410 once itself, from its own version: ours relists after)
        [{"type": "MODIFIED", "object": _pod("9", "Succeeded")}],
    )
    watch = _watch(api)
    assert api.done.wait(30)
    pods = watch.stop()

    assert api.versions[0] is None and api.versions[1] == "5"  # resumed from the last event's version
    assert None in api.versions[2:]  # then relisted from the start
    assert [pod["status"]["phase"] for pod in pods] == ["Succeeded"]


def test_a_forbidden_watch_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    from kubernetes.client.exceptions import ApiException

    class Forbidden(ScriptedPods):
        def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> _Response:
            """:return: V1PodList"""
            self.versions.append(None)
            if len(self.versions) >= 3:
                self.done.set()
            raise ApiException(status=403, reason="Forbidden")

    api = Forbidden()
    with caplog.at_level(logging.WARNING, logger="airflow_provider_disttrain.pods.pod_watch"):
        watch = _watch(api)
        assert api.done.wait(30)
        assert watch.stop() == []

    said = [record.getMessage() for record in caplog.records if "needs 'watch' on pods" in record.getMessage()]
    assert len(said) == 1 and "PyTorchJob default/train" in said[0]
