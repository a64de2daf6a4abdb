"""The orphan cleanup and Airflow 3.4 Task Loops: each iteration's job is told apart by its own key.

Airflow's ``get_task_states`` reports a looped task under one name with its newest iteration's state, so
a looped job is judged orphaned only once its loop's newest iteration has ended (iterations run one after
another), never on the state of an iteration that is not its own while the loop runs.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.ownership.naming import LoopRegion, task_instance_labels
from airflow_provider_disttrain.ownership.orphans import KEPT_LOOP_RUNNING, Action, find_task_instance, job_owner, judge
from tests.unit.fakes import make_job, running_status
from tests.unit.ownership.test_orphans import GRACE, NOW, RUN_ID

REGION = "0190f3a2-7c1e-7d4b-9a55-3b6f2d8e1c40"


def looped_job(iteration: int, region: str = REGION) -> Any:
    labels = task_instance_labels(
        "nightly", "train", RUN_ID, -1, try_number=1, loop=LoopRegion(region, iteration, iteration)
    )
    return make_job(f"train-{iteration}", status=running_status(), labels=labels)


def test_a_looped_jobs_owner_carries_its_iteration_and_its_key_finds_its_run() -> None:
    owner = job_owner(looped_job(2))

    assert owner is not None and owner.loop == LoopRegion(REGION, 2, 2)
    assert find_task_instance(owner, {"other-run": {"train": "failed"}, RUN_ID: {"train": "failed"}}) == (
        RUN_ID,
        "failed",
    )


def test_labels_naming_another_iteration_match_no_task_instance() -> None:
    """Copying iteration 1's key onto labels that say iteration 0: the key no longer hashes to them."""
    job = looped_job(0)
    job["metadata"]["labels"]["disttrain.airflow.apache.org/task-instance"] = looped_job(1)["metadata"]["labels"][
        "disttrain.airflow.apache.org/task-instance"
    ]
    owner = job_owner(job)

    assert owner is not None and find_task_instance(owner, {RUN_ID: {"train": "failed"}}) is None


def test_a_looped_job_is_kept_while_its_loops_newest_iteration_runs() -> None:
    """Iteration 0's job with iteration 1 running: 'running' is iteration 1's state, not iteration 0's."""
    owner = job_owner(looped_job(0))
    assert owner is not None

    verdict = judge(JobView.of(looped_job(0)), find_task_instance(owner, {RUN_ID: {"train": "running"}}), NOW, GRACE)

    assert (verdict.action, verdict.kept_because) == (Action.KEEP, KEPT_LOOP_RUNNING)


def test_a_looped_job_is_an_orphan_once_its_loops_newest_iteration_has_ended() -> None:
    owner = job_owner(looped_job(0))
    assert owner is not None

    verdict = judge(JobView.of(looped_job(0)), find_task_instance(owner, {RUN_ID: {"train": "failed"}}), NOW, GRACE)

    assert verdict.action is Action.MARK
