"""What a job held, from its pods: GPUs, GPU-seconds, running and queued seconds (``job/usage.py``)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from airflow_provider_disttrain.job.usage import Usage, describe, job_usage, pod_span

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()


def at(seconds: float) -> str:
    """The API's time ``seconds`` after T0."""
    return datetime.fromtimestamp(T0 + seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    *,
    gpus: int | str | None = 0,
    started: float | None = None,
    finished: float | None = None,
    phase: str = "Running",
    previous: tuple[float, float] | None = None,
    waiting: bool = False,
) -> dict[str, Any]:
    """A pod of one container asking for ``gpus``: running since ``started``, or terminated at ``finished``;
    ``previous``: the run it restarted from; ``waiting``: waiting to restart (CrashLoopBackOff)."""
    limits = {"nvidia.com/gpu": gpus, "cpu": "2"} if gpus else {"cpu": "2"}
    state: dict[str, Any] = {}
    if waiting:
        state = {"waiting": {"reason": "CrashLoopBackOff"}}
    elif finished is not None:
        state = {"terminated": {"exitCode": 0, "startedAt": at(started or 0), "finishedAt": at(finished)}}
    elif started is not None:
        state = {"running": {"startedAt": at(started)}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    status: dict[str, Any] = {"name": "pytorch", "state": state, "restartCount": 1 if previous else 0}
    if previous is not None:
        last_run = {"exitCode": 1, "startedAt": at(previous[0]), "finishedAt": at(previous[1])}
        status["lastState"] = {"terminated": last_run}
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "pytorch", "resources": {"limits": limits}}]},
        "status": {"phase": phase, "containerStatuses": [status]},
    }


def test_several_finished_replicas_count_their_gpus_times_their_own_running_time() -> None:
    pods = [
        pod("master-0", gpus=2, started=10, finished=110, phase="Succeeded"),
        pod("worker-0", gpus=2, started=12, finished=110, phase="Succeeded"),
        pod("worker-1", gpus="2", started=14, finished=100, phase="Succeeded"),
    ]

    usage = job_usage(pods, created=at(0), now=T0 + 1000)

    assert usage == Usage(gpus=6, gpu_seconds=2 * 100 + 2 * 98 + 2 * 86, running_seconds=100.0, queued_seconds=10.0)
    assert json.loads(json.dumps(usage.as_dict())) == usage.as_dict()


def test_a_job_without_gpus_has_running_time_and_no_gpu_seconds() -> None:
    usage = job_usage([pod("launcher", started=5, finished=65, phase="Succeeded")], created=at(0), now=T0 + 100)

    assert usage == Usage(gpus=0, gpu_seconds=0.0, running_seconds=60.0, queued_seconds=5.0)


def test_a_running_pod_counts_until_now_and_a_pending_one_not_at_all() -> None:
    pods = [pod("master-0", gpus=1, started=20), pod("worker-0", gpus=1, phase="Pending")]

    usage = job_usage(pods, created=at(0), now=T0 + 50)

    # Both ask for a GPU; only the one that started has held it, for 30 s so far.
    assert usage == Usage(gpus=2, gpu_seconds=30.0, running_seconds=30.0, queued_seconds=20.0)


def test_a_container_restarted_in_place_keeps_its_pod_and_gpus_from_its_first_start() -> None:
    restarted = pod("worker-0", gpus=4, started=60, finished=100, phase="Succeeded", previous=(10, 50))
    crashlooping = pod("worker-1", gpus=4, phase="Running", previous=(10, 40), waiting=True)

    assert pod_span(restarted, now=T0 + 500) == (T0 + 10, T0 + 100)
    # Waiting to restart, the pod still holds its GPUs: until now.
    assert pod_span(crashlooping, now=T0 + 70) == (T0 + 10, T0 + 70)
    assert job_usage([restarted, crashlooping], created=at(0), now=T0 + 70).gpu_seconds == 4 * 90 + 4 * 60


def test_pods_that_ran_one_after_another_count_the_wall_time_once_and_the_gaps_not() -> None:
    pods = [
        pod("a", gpus=1, started=0, finished=40, phase="Failed"),
        pod("b", gpus=1, started=30, finished=60, phase="Succeeded"),
        pod("c", gpus=1, started=100, finished=110, phase="Succeeded"),
    ]

    usage = job_usage(pods, created=at(0), now=T0 + 500)

    assert usage.running_seconds == 70.0  # 0-60 and 100-110
    assert usage.gpu_seconds == 80.0  # each pod its own span


def test_a_pod_whose_containers_all_terminated_is_over_before_its_phase_says_so() -> None:
    done = pod("worker-0", gpus=1, started=0, finished=30, phase="Running")

    assert pod_span(done, now=T0 + 500) == (T0, T0 + 30)


@pytest.mark.parametrize("pods", [None, []], ids=["listing failed", "pods gone"])
def test_without_pods_nothing_says_how_long_the_job_ran(pods: list[dict[str, Any]] | None) -> None:
    assert job_usage(pods, created=at(0), now=T0 + 100) == Usage(0, None, None, None)


def test_a_container_that_ran_without_a_time_makes_the_figures_unknown_not_smaller() -> None:
    broken = pod("worker-0", gpus=1, started=0, finished=30, phase="Succeeded")
    del broken["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]

    usage = job_usage([pod("master-0", gpus=1, started=0, finished=30, phase="Succeeded"), broken], now=T0 + 60)

    assert usage == Usage(gpus=2, gpu_seconds=None, running_seconds=None, queued_seconds=None)


def test_without_the_creation_time_the_seconds_queued_are_unknown() -> None:
    usage = job_usage([pod("master-0", gpus=1, started=0, finished=30, phase="Succeeded")], created=None, now=T0)

    assert usage.queued_seconds is None
    assert usage.gpu_seconds == 30.0


def test_a_job_whose_pods_have_not_started_has_queued_until_now() -> None:
    usage = job_usage([pod("master-0", gpus=1, phase="Pending")], created=at(0), now=T0 + 45)

    assert usage == Usage(gpus=1, gpu_seconds=0.0, running_seconds=0.0, queued_seconds=45.0)


def test_the_annotation_reads_back_and_anything_else_reads_as_none() -> None:
    usage = Usage(gpus=8, gpu_seconds=800.5, running_seconds=100.0, queued_seconds=None)

    assert Usage.from_annotation(usage.annotation()) == usage
    for odd in (None, "", "{", "[]", '{"gpus": "8"}', '{"gpus": 1, "gpu_seconds": -1}', '{"gpus": true}'):
        assert Usage.from_annotation(odd) is None


def test_the_log_line_says_what_is_unknown() -> None:
    assert describe(Usage(2, 20.0, 10.0, None)) == "2 GPU(s), 20 GPU-seconds, running 10 s, queued unknown s"
