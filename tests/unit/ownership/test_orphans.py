"""Which job the orphan cleanup keeps, marks or deletes, decided from the job and its task instance's state."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.ownership import naming, orphans
from airflow_provider_disttrain.ownership.deployment import DEFAULT_DEPLOYMENT_ID
from airflow_provider_disttrain.ownership.naming import deployment_label_value, task_instance_key, task_instance_labels
from airflow_provider_disttrain.ownership.orphans import (
    ORPHANED_SINCE_ANNOTATION,
    Action,
    JobOwner,
    find_task_instance,
    job_owner,
    judge,
    task_state_name,
)
from tests.unit.fakes import make_job, running_status, succeeded_status, suspended_status

NOW = datetime(2026, 12, 1, 20, 0, tzinfo=timezone.utc)
GRACE = timedelta(minutes=30)
RUN_ID = "manual__2026-12-01T19:00:00.123456+00:00"


def labelled_job(
    status: dict[str, Any] | None = None, *, map_index: int = -1, orphaned_since: str | None = None
) -> Any:
    job = make_job(status=status, labels=task_instance_labels("nightly", "train", RUN_ID, map_index, try_number=1))
    if orphaned_since is not None:
        job["metadata"]["annotations"] = {ORPHANED_SINCE_ANNOTATION: orphaned_since}
    return job


def test_the_owner_comes_from_the_labels_the_operators_put_on_every_job() -> None:
    expected_key = task_instance_key("nightly", "train", RUN_ID, 7)
    deployment = deployment_label_value(DEFAULT_DEPLOYMENT_ID)

    assert job_owner(labelled_job(map_index=7)) == JobOwner("nightly", "train", 7, expected_key, deployment)
    assert job_owner(labelled_job()) == JobOwner(
        "nightly", "train", -1, task_instance_key("nightly", "train", RUN_ID, -1), deployment
    )
    assert job_owner(make_job(labels={"app": "not-ours"})) is None


def test_the_run_id_is_recovered_through_the_task_instance_hash_not_the_sanitized_label() -> None:
    owner = job_owner(labelled_job(map_index=3))
    assert owner is not None
    # get_task_states' answer for dag "nightly", task "train": one dict per run, mapped ones as train_<i>.
    states = {
        "manual__2026-12-01T18:00:00+00:00": {"train_3": "success"},
        RUN_ID: {"train_2": "running", "train_3": "failed"},
    }

    assert find_task_instance(owner, states) == (RUN_ID, "failed")
    assert find_task_instance(owner, {RUN_ID: {"train_2": "running"}}) is None
    assert task_state_name("train", -1) == "train" and task_state_name("train", 3) == "train_3"


@pytest.mark.parametrize("state", ["running", "deferred", "queued", "scheduled", "up_for_retry", "restarting", None])
def test_a_job_whose_task_instance_may_still_wait_for_it_is_kept(state: str | None) -> None:
    verdict = judge(JobView.of(labelled_job(running_status())), (RUN_ID, state), NOW, timedelta(0))

    assert verdict.action is Action.KEEP
    assert (state or "cleared") in verdict.reason


@pytest.mark.parametrize("state", ["success", "failed", "skipped", "upstream_failed", "removed"])
def test_an_unfinished_job_of_an_ended_task_instance_is_marked_then_deleted_after_the_grace_period(state: str) -> None:
    first = judge(JobView.of(labelled_job(running_status())), (RUN_ID, state), NOW, GRACE)
    assert first.action is Action.MARK and "deleted once 0:30:00 has passed" in first.reason

    marked = NOW.isoformat()
    early = judge(
        JobView.of(labelled_job(running_status(), orphaned_since=marked)), (RUN_ID, state), NOW + GRACE / 2, GRACE
    )
    assert early.action is Action.KEEP and "orphaned since" in early.reason
    late = judge(JobView.of(labelled_job(running_status(), orphaned_since=marked)), (RUN_ID, state), NOW + GRACE, GRACE)
    assert late.action is Action.DELETE and f"{state}, job running" in late.reason


def test_a_suspended_job_of_an_ended_task_instance_is_an_orphan_too() -> None:
    """Kueue would admit it later and run it for nobody."""
    assert (
        judge(JobView.of(labelled_job(suspended_status())), (RUN_ID, "failed"), NOW, timedelta(0)).action
        is Action.DELETE
    )


def test_no_grace_period_deletes_in_the_run_that_finds_the_orphan() -> None:
    assert (
        judge(JobView.of(labelled_job(running_status())), (RUN_ID, "failed"), NOW, timedelta(0)).action is Action.DELETE
    )


def test_a_finished_job_is_left_to_delete_on_finish_and_the_ttl() -> None:
    verdict = judge(JobView.of(labelled_job(succeeded_status())), (RUN_ID, "failed"), NOW, timedelta(0))

    assert verdict.action is Action.KEEP and "succeeded" in verdict.reason


def test_a_job_no_task_instance_matches_is_kept() -> None:
    """Another Airflow's job in a shared namespace, or one whose DAG run was deleted: not provably ours."""
    assert judge(JobView.of(labelled_job(running_status())), None, NOW, timedelta(0)).action is Action.KEEP


def test_a_marked_job_whose_task_instance_is_active_again_loses_its_mark() -> None:
    """Someone cleared the failed task: its new try reattaches to the job, which must not be deleted later."""
    job = labelled_job(running_status(), orphaned_since=(NOW - 2 * GRACE).isoformat())

    verdict = judge(JobView.of(job), (RUN_ID, "running"), NOW, GRACE)

    assert verdict.action is Action.UNMARK


def test_a_mark_without_an_offset_is_read_as_utc() -> None:
    job = labelled_job(running_status(), orphaned_since="2026-12-01T19:00:00")

    assert judge(JobView.of(job), (RUN_ID, "failed"), NOW, GRACE).action is Action.DELETE


def annotated_job(dag_id: str, status: dict[str, Any], *, wait: bool = True, **annotations: str) -> Any:
    """A job as the operators label and annotate it (``task_instance_annotations``: the full ids)."""
    job = make_job(status=status, labels=task_instance_labels(dag_id, "train", RUN_ID, -1, try_number=1))
    job["metadata"]["annotations"] = {
        **naming.task_instance_annotations(dag_id, "train", wait_for_completion=wait),
        **annotations,
    }
    return job


def test_a_job_submitted_without_waiting_is_never_its_submitters_orphan() -> None:
    """Its task succeeds as soon as the job exists; a sensor (example_dags/elastic_pytorch.py) waits for it."""
    job = annotated_job("elastic", running_status(), wait=False)

    for state in ("success", "failed"):
        verdict = judge(JobView.of(job), (RUN_ID, state), NOW, timedelta(0))
        assert verdict.action is Action.KEEP and "wait_for_completion=False" in verdict.reason
    # A mark an older cleanup wrote comes off, so that no later run deletes it.
    marked = annotated_job("elastic", running_status(), wait=False, **{ORPHANED_SINCE_ANNOTATION: NOW.isoformat()})
    assert judge(JobView.of(marked), (RUN_ID, "success"), NOW + GRACE, GRACE).action is Action.UNMARK
    # The operators' default (they wait) is judged as before.
    assert (
        judge(JobView.of(annotated_job("elastic", running_status())), (RUN_ID, "success"), NOW, GRACE).action
        is Action.MARK
    )


@pytest.mark.parametrize("dag_id", ["nightly_" + "x" * 60, "_etl", "données"])
def test_dag_ids_the_labels_cannot_hold_are_read_from_the_annotations(dag_id: str) -> None:
    owner = job_owner(annotated_job(dag_id, running_status()))

    assert owner is not None and owner.dag_id == dag_id
    assert find_task_instance(owner, {RUN_ID: {"train": "failed"}}) == (RUN_ID, "failed")


def test_a_job_without_the_annotations_is_read_from_its_labels() -> None:
    """Jobs created by earlier versions: the label values, which equal the ids that fit a label."""
    job = labelled_job(running_status())
    job["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}

    owner = job_owner(job)

    assert owner is not None and (owner.dag_id, owner.task_id) == ("nightly", "train")
    assert judge(JobView.of(job), (RUN_ID, "failed"), NOW, GRACE).action is Action.MARK


def test_only_unfinished_or_marked_jobs_need_judging() -> None:
    """A finished job without a mark is kept whatever its task instance: Airflow need not be asked."""
    needs_judging = orphans.needs_judging
    assert needs_judging(JobView.of(labelled_job(running_status()))) and needs_judging(
        JobView.of(labelled_job(suspended_status()))
    )
    assert not needs_judging(JobView.of(labelled_job(succeeded_status())))
    assert needs_judging(JobView.of(labelled_job(succeeded_status(), orphaned_since=NOW.isoformat())))
    for task_instance in ((RUN_ID, "running"), (RUN_ID, "failed"), None):
        assert (
            judge(JobView.of(labelled_job(succeeded_status())), task_instance, NOW, timedelta(0)).action is Action.KEEP
        )
