"""Airflow 3.4 Task Loops: every iteration of a looped training task is a task instance of its own.

In a loop all iterations share dag, task, run and map index (-1) and each starts at try 1; what tells
them apart is ``ti.region_id``/``ti.region_index`` and ``context["loop"].index``. These tests put those
on the fake task instance and context, so they run on every Airflow version (3.0-3.3 have no loops: there
the provider reads the attributes with getattr and builds today's identity). Outside a loop the key and
labels are exactly those of 32c71f4 (``labels_32c71f4``), so a job running across an upgrade is found.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import JobAlreadyExistsError
from airflow_provider_disttrain.ownership.deployment import deployment_id
from airflow_provider_disttrain.ownership.identity import loop_region, task_instance_keys_of
from airflow_provider_disttrain.ownership.naming import (
    LOOP_ITERATION_LABEL,
    REGION_ID_LABEL,
    REGION_INDEX_LABEL,
    TASK_INSTANCE_LABEL,
    task_instance_labels,
)
from tests.unit.fakes import (
    FakeStateStore,
    FakeTI,
    FakeTrainingJobHook,
    make_context,
    make_job,
    running_status,
    succeeded_status,
)
from tests.unit.ownership.labels_32c71f4 import labels_32c71f4
from tests.unit.ownership.test_identity import make_operator

LOOP_REGION = uuid.UUID("0190f3a2-7c1e-7d4b-9a55-3b6f2d8e1c40")


def looped_ti(iteration: int, try_number: int = 1) -> FakeTI:
    """A task instance of iteration ``iteration`` as Airflow 3.4 gives it: map index -1, the loop's region."""
    ti = FakeTI(try_number=try_number)
    ti.region_id = LOOP_REGION  # type: ignore[attr-defined]
    ti.region_index = iteration  # type: ignore[attr-defined]
    return ti


def looped_context(ti: FakeTI, store: FakeStateStore | None = None) -> dict[str, Any]:
    context = make_context(ti, store if store is not None else FakeStateStore())
    context["loop"] = SimpleNamespace(index=ti.region_index, max_iterations=5)  # type: ignore[attr-defined]
    return context


def test_outside_a_loop_the_labels_are_exactly_those_of_32c71f4() -> None:
    """A mapped task on 3.4 has a region too (its expansion's): without a loop in the context it changes nothing."""
    ti = FakeTI(map_index=3, try_number=2)
    ti.region_id = LOOP_REGION  # type: ignore[attr-defined]
    ti.region_index = 3  # type: ignore[attr-defined]
    hook = FakeTrainingJobHook()

    manifest = make_operator(hook).build_job_manifest(make_context(ti), "default")

    today = labels_32c71f4(ti.dag_id, ti.task_id, ti.run_id, 3, 2, deployment_id())
    assert {k: v for k, v in manifest["metadata"]["labels"].items() if k in today} == today
    assert set(manifest["metadata"]["labels"]) - set(today) <= {"kueue.x-k8s.io/queue-name"}
    assert task_instance_keys_of(ti, make_context(ti)).task_instance_key == today[TASK_INSTANCE_LABEL]


def test_a_retry_outside_a_loop_takes_over_the_job_that_32c71f4_labelled() -> None:
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook()
    labels = labels_32c71f4(ti.dag_id, ti.task_id, ti.run_id, -1, 1, deployment_id())
    hook.add_job(make_job("train-before-upgrade", uid="uid-old", status=running_status(), labels=labels))

    result = make_operator(hook, wait_for_completion=False).execute(make_context(ti, FakeStateStore()))

    assert result["name"] == "train-before-upgrade"
    assert hook.called("create_job") == []


def test_each_iteration_without_waiting_makes_and_returns_its_own_job() -> None:
    """The issue's silent wrong result: three iterations made one job and all returned iteration 0's."""
    hook = FakeTrainingJobHook()
    operator = make_operator(hook, wait_for_completion=False)

    results = [operator.execute(looped_context(looped_ti(i))) for i in range(3)]

    assert len(hook.called("create_job")) == 3
    assert len({result["uid"] for result in results}) == 3
    for iteration, result in enumerate(results):
        labels = hook.job(result["name"])["metadata"]["labels"]  # type: ignore[index]
        assert labels[LOOP_ITERATION_LABEL] == str(iteration)
        assert labels[REGION_INDEX_LABEL] == str(iteration)
        assert labels[REGION_ID_LABEL] == str(LOOP_REGION)


def test_a_retry_of_one_iteration_never_adopts_another_iterations_running_job() -> None:
    hook = FakeTrainingJobHook()
    earlier = task_instance_labels(
        "training_dag", "train", FakeTI().run_id, -1, 1, loop=loop_region(looped_ti(0), looped_context(looped_ti(0)))
    )
    hook.add_job(make_job("train-iteration-0", uid="uid-0", status=running_status(), labels=earlier))
    retry = looped_ti(1, try_number=2)

    result = make_operator(hook, wait_for_completion=False).execute(looped_context(retry))

    assert result["name"] != "train-iteration-0"
    assert len(hook.called("create_job")) == 1
    assert hook.job("train-iteration-0") is not None


def test_a_retry_of_an_iteration_takes_over_its_own_running_job() -> None:
    hook = FakeTrainingJobHook()
    mine = task_instance_labels(
        "training_dag", "train", FakeTI().run_id, -1, 1, loop=loop_region(looped_ti(1), looped_context(looped_ti(1)))
    )
    hook.add_job(make_job("train-iteration-1", uid="uid-1", status=running_status(), labels=mine))

    result = make_operator(hook, wait_for_completion=False).execute(looped_context(looped_ti(1, try_number=2)))

    assert result["name"] == "train-iteration-1"
    assert hook.called("create_job") == []


def test_an_explicit_name_never_replaces_another_iterations_job() -> None:
    """With a fixed job_name, iteration 1 used to delete iteration 0's kept job as 'its own earlier try'."""
    hook = FakeTrainingJobHook()
    operator = make_operator(hook, job_name="nightly", wait_for_completion=False)
    operator.execute(looped_context(looped_ti(0)))

    with pytest.raises(JobAlreadyExistsError, match="loop iteration 0"):
        operator.execute(looped_context(looped_ti(1)))

    assert hook.called("delete_job") == []
    assert hook.job("nightly")["metadata"]["labels"][LOOP_ITERATION_LABEL] == "0"  # type: ignore[index]


def test_without_loop_attributes_on_the_task_instance_the_iteration_still_counts() -> None:
    """Only the context's loop is required: a task instance without region attributes keys by the iteration."""
    ti = FakeTI()
    context = make_context(ti)
    context["loop"] = SimpleNamespace(index=2)

    assert loop_region(ti, context) is not None
    assert loop_region(ti, context).region_index == 2  # type: ignore[union-attr]
    assert loop_region(ti, make_context(ti)) is None


def test_an_explicit_name_never_deletes_another_iterations_finished_job() -> None:
    """The issue's case: iteration 0's job had succeeded and was kept; iteration 1 deleted it as its own try's."""
    hook = FakeTrainingJobHook()
    ti0 = looped_ti(0)
    labels = task_instance_labels(
        ti0.dag_id, ti0.task_id, ti0.run_id, -1, 1, loop=loop_region(ti0, looped_context(ti0))
    )
    hook.add_job(make_job("nightly", uid="uid-0", status=succeeded_status(), labels=labels))

    with pytest.raises(JobAlreadyExistsError, match="loop iteration 0"):
        make_operator(hook, job_name="nightly", wait_for_completion=False).execute(looped_context(looped_ti(1)))

    assert hook.called("delete_job") == []
    assert hook.job("nightly")["metadata"]["uid"] == "uid-0"  # type: ignore[index]
