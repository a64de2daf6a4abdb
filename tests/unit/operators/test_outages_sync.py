"""A control-plane outage while a task waits in sync mode: ridden out for ``wait_policy.api_failure_tolerance``,
then the task ends as "lost contact" and the job, last seen healthy, is left running.

The hook is ``FakeTrainingJobHook``; its reads fail the way the sync kubernetes client fails in an outage
(urllib3's refused connection, 503, 429). The operator's clock is a ``ManualClock``: a 15 s outage and a
15 minute tolerance pass in no real time.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, NewConnectionError

from airflow_provider_disttrain.exceptions import ClusterAccessError, LostContactError
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy
from tests.unit.fakes import (
    FakeTI,
    FakeTrainingJobHook,
    make_context,
    queued_status,
    running_status,
    succeeded_status,
    with_hook,
)


def refused() -> Exception:
    """What the sync client raises when nothing listens on the API server's address."""
    cause = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")  # type: ignore[arg-type]
    return MaxRetryError(None, "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/train", cause)  # type: ignore[arg-type]


OUTAGE_ERRORS = (
    refused,
    lambda: ApiException(status=503, reason="Service Unavailable"),
    lambda: ApiException(status=429, reason="Too Many Requests"),
)


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> TrainingJobOperator:
    arguments: dict[str, Any] = {"task_id": "train", "image": "trainer:1", "num_workers": 1, **kwargs}
    return with_hook(TrainingJobOperator(**arguments), hook)


def outage_from_read(operator: TrainingJobOperator, hook: FakeTrainingJobHook, first: int, seconds: float) -> list[int]:
    """From the ``first``-th read of the job on, every read fails for ``seconds`` of the operator's clock
    (cycling through a refused connection, 503 and 429); returns the list of failed read numbers."""
    failed: list[int] = []
    until: list[float] = []

    def on_get(number: int) -> None:
        if number == first:
            until.append(operator.clock.now + seconds)
        if until and operator.clock.now < until[0]:
            failed.append(number)
            raise OUTAGE_ERRORS[len(failed) % len(OUTAGE_ERRORS)]()

    hook.on_get = on_get
    return failed


def test_a_15s_outage_in_sync_mode_is_waited_out() -> None:
    hook = FakeTrainingJobHook(progression=[queued_status(), running_status(), running_status(), succeeded_status()])
    operator = make_operator(hook, wait_policy=WaitPolicy(poll_interval=5))
    failed = outage_from_read(operator, hook, first=3, seconds=15)

    result = operator.execute(make_context(FakeTI()))

    assert result["state"] == "succeeded"
    assert len(failed) >= 3  # the outage was met, on more than one read, and ridden out
    assert hook.called("delete_job") == []


def test_an_outage_beyond_the_tolerance_in_sync_mode_ends_as_lost_contact_and_keeps_the_job() -> None:
    hook = FakeTrainingJobHook(progression=[queued_status(), running_status()])
    operator = make_operator(
        hook,
        wait_policy=WaitPolicy(poll_interval=5, api_failure_tolerance=timedelta(minutes=2)),
        retries=0,  # the last try: nothing would come back for the job
    )
    outage_from_read(operator, hook, first=4, seconds=3600)

    with pytest.raises(LostContactError) as raised:
        operator.execute(make_context(FakeTI()))

    message = str(raised.value)
    assert "lost contact with the API server for 120s" in message
    assert "was last seen running" in message
    assert "was NOT deleted" in message
    assert hook.called("delete_job") == []
    assert hook.only_job()["status"] == running_status()  # still there, as last seen


def test_a_refusal_during_the_wait_is_not_ridden_out_as_an_outage() -> None:
    """403 (the sync hook's ``ClusterAccessError``) keeps failing the task at once: it does not heal."""
    hook = FakeTrainingJobHook(progression=[queued_status(), running_status()])
    operator = make_operator(hook, wait_policy=WaitPolicy(poll_interval=5))

    def on_get(number: int) -> None:
        if number >= 3:
            raise ClusterAccessError("get PyTorchJob default/train: forbidden (403 Forbidden)")

    hook.on_get = on_get
    with pytest.raises(ClusterAccessError):
        operator.execute(make_context(FakeTI()))
    assert len(hook.called("get_job")) == 3


@pytest.mark.parametrize("value", [0, -5, timedelta(0), "15m", True])
def test_api_failure_tolerance_must_be_positive(value: Any) -> None:
    with pytest.raises(ValueError, match=r"wait_policy\.api_failure_tolerance"):
        WaitPolicy(api_failure_tolerance=value)


def test_api_failure_tolerance_defaults_to_the_length_of_a_control_plane_upgrade() -> None:
    assert WaitPolicy().api_failure_tolerance_seconds == 15 * 60
    assert WaitPolicy(api_failure_tolerance=timedelta(minutes=30)).api_failure_tolerance_seconds == 1800
