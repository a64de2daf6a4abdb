"""The provider's metrics reach a StatsD server through Airflow's own Stats, as ``[metrics]`` configures it."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from airflow_provider_disttrain.hooks.api_errors import retry_transient
from airflow_provider_disttrain.utils import telemetry
from tests.statsd_listener import StatsdListener


def test_the_census_sends_jobs_by_state_gpus_held_and_waiting_triggers_on_each_change(statsd: StatsdListener) -> None:
    census = telemetry.JobCensus()
    census.observe("a", "job-a", "queued", 0)
    census.observe("b", "job-b", "running", 16)
    assert statsd.last_gauges() == {
        "disttrain.triggers.waiting": 2,
        "disttrain.gpus_held": 16,
        "disttrain.jobs.queued": 1,
        "disttrain.jobs.suspended": 0,
        "disttrain.jobs.running": 1,
    }
    sent = len(statsd.ours())

    census.observe("b", "job-b", "running", 16)  # nothing changed: nothing sent
    assert len(statsd.ours()) == sent
    census.observe("a", "job-a", "running", 8)
    census.forget("b")
    census.forget("b")  # a trigger ends once, but forgetting twice changes nothing

    assert statsd.last_gauges() == {
        "disttrain.triggers.waiting": 1,
        "disttrain.gpus_held": 8,
        "disttrain.jobs.queued": 0,
        "disttrain.jobs.suspended": 0,
        "disttrain.jobs.running": 1,
    }
    assert len(statsd.ours()) == sent + 2 * 5  # two more changes, all five gauges each


def test_a_job_waited_for_by_its_operator_and_a_sensor_counts_once() -> None:
    census = telemetry.JobCensus()
    census.observe("operator's trigger", "PyTorchJob ml/train", "running", 24)
    census.observe("sensor's trigger", "PyTorchJob ml/train", "running", 24)
    census.observe("another job's trigger", "PyTorchJob ml/other", "queued", 0)

    assert census.totals() == {"queued": 1, "suspended": 0, "running": 1, "gpus_held": 24, "waiting": 3}

    census.forget("operator's trigger")  # the sensor still watches: the job and its GPUs still count
    assert census.totals() == {"queued": 1, "suspended": 0, "running": 1, "gpus_held": 24, "waiting": 2}


def test_every_failed_attempt_of_a_retried_request_is_an_api_error_of_its_class(statsd: StatsdListener) -> None:
    answers = iter([ApiException(status=503), ApiException(status=429), ApiException(status=404)])

    @retry_transient(attempts=3)
    def read() -> None:
        raise next(answers)

    read.retry.sleep = lambda seconds: None  # type: ignore[attr-defined]  # tenacity's backoff, not waited here
    with pytest.raises(ApiException):
        read()

    # The 404 is an answer the callers expect (the job is absent), not an error to count.
    assert statsd.counters() == {"disttrain.api_errors.server": 1, "disttrain.api_errors.throttled": 1}


def test_a_metrics_backend_that_fails_never_breaks_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def __getattr__(self, name: str) -> object:
            raise OSError("statsd host unreachable")

    monkeypatch.setattr(telemetry, "_stats", Broken)
    census = telemetry.JobCensus()

    telemetry.api_error("server")
    census.observe("a", "job-a", "running", 8)

    assert census.totals()["running"] == 1


def test_gpu_seconds_are_counted_whole_tagged_by_namespace_and_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, tuple[object, ...], dict[str, object]]] = []

    class Recording:
        def incr(self, name: str, *args: object, tags: dict[str, object]) -> None:
            sent.append((name, args, tags))

    monkeypatch.setattr(telemetry, "_stats", Recording)

    telemetry.gpu_seconds(7199.6, namespace="ml", queue="gpu-queue")
    telemetry.gpu_seconds(1.0, namespace="ml", queue=None)
    telemetry.gpu_seconds(0.2, namespace="ml", queue=None)  # a job without GPUs (or 0 whole): nothing sent

    assert [(name, args, {k: v for k, v in tags.items() if k != "hostname"}) for name, args, tags in sent] == [
        ("disttrain.gpu_seconds", (7200,), {"namespace": "ml", "queue": "gpu-queue"}),
        ("disttrain.gpu_seconds", (1,), {"namespace": "ml", "queue": "none"}),
    ]
