"""``startup_timeout`` limits how long a job may take to start, not how long it may be suspended later.

The operator's sync wait against ``FakeTrainingJobHook``: the job's status moves on with the wait's clock,
through the conditions the training-operator and the mpi-operator write when a job is suspended.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import JobTimeoutError
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy
from tests.unit.fakes import (
    END,
    START,
    FakeTrainingJobHook,
    ManualClock,
    condition,
    make_context,
    running_status,
    succeeded_status,
    with_hook,
)

SUSPENDED_AT = "2024-05-01T10:05:00Z"


def suspended_after_running(kind_prefix: str) -> dict[str, Any]:
    """What the operators write when a running job is suspended (runPolicy.suspend: true)."""
    return {
        "conditions": [
            condition("Created", START),
            condition("Running", SUSPENDED_AT, reason=f"{kind_prefix}Suspended", status="False"),
            condition("Suspended", SUSPENDED_AT, reason=f"{kind_prefix}Suspended"),
        ],
    }


def created_suspended() -> dict[str, Any]:
    """A job submitted suspended, waiting for a queueing system (e.g. Kueue) to admit it."""
    return {"conditions": [condition("Created", START), condition("Suspended", START, reason="JobSuspended")]}


def resumed_running(leader: str) -> dict[str, Any]:
    status = running_status(leader=leader)
    status["conditions"] = [
        condition("Created", START),
        condition("Suspended", END, reason="JobResumed", status="False"),
        condition("Running", END),
    ]
    return status


@pytest.mark.parametrize(
    ("operator_class", "leader", "kind_prefix"),
    [(TrainingJobOperator, "Master", "PyTorchJob"), (MPIJobOperator, "Launcher", "MPIJob")],
    ids=["PyTorchJob", "MPIJob"],
)
def test_a_job_suspended_after_it_ran_is_waited_for_past_the_startup_timeout(
    operator_class: type, leader: str, kind_prefix: str
) -> None:
    suspended = suspended_after_running(kind_prefix)
    clock = ManualClock()
    # Each status holds for one poll interval on the wait's clock, however often the wait reads the job.
    hook = FakeTrainingJobHook(
        progression=[
            running_status(leader=leader),
            *[suspended] * 5,
            resumed_running(leader),
            succeeded_status(leader=leader),
        ],
        clock=clock,
        step_seconds=0.02,
    )
    operator = with_hook(
        operator_class(
            task_id="train",
            image="trainer:1",
            num_workers=1,
            wait_policy=WaitPolicy(poll_interval=0.02, startup_timeout=0.01),
        ),
        hook,
        clock,
    )

    result = operator.execute(make_context())

    assert result["state"] == "succeeded"
    assert hook.called("delete_job") == []
    assert sum(clock.sleeps) >= 0.1  # it waited through the suspension, ten times the startup_timeout


def test_a_job_held_suspended_from_the_start_times_out_as_not_started() -> None:
    hook = FakeTrainingJobHook(progression=[created_suspended()])
    operator = with_hook(
        TrainingJobOperator(
            task_id="train",
            image="trainer:1",
            num_workers=1,
            wait_policy=WaitPolicy(poll_interval=0.02, startup_timeout=0.05),
        ),
        hook,
    )

    with pytest.raises(JobTimeoutError, match="did not start within startup_timeout; last state: suspended"):
        operator.execute(make_context())
    assert hook.called("delete_job")
