"""Two Airflow deployments (staging and prod) running the same DAG against one namespace, jobs made by the
release before the deployment label, and copies of a job that carry its labels under another uid.

The DAG, task and run ids are the same in both deployments (``scheduled__...`` run ids are), so only the
deployment (``[disttrain] deployment_id``, set here through its environment variable as a deployment
sets it) tells their jobs apart. ``FakeTrainingJobHook`` stands in for the cluster.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.exceptions import TaskDeferralTimeout

from airflow_provider_disttrain.exceptions import JobAlreadyExistsError, JobTimeoutError
from airflow_provider_disttrain.job.outcome import TIMEOUT, JobRef, make_outcome
from airflow_provider_disttrain.operators.orphans import DeleteOrphanedTrainingJobsOperator
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.ownership.identity import STATE_STORE_KEY
from airflow_provider_disttrain.ownership.naming import WAIT_FOR_COMPLETION_ANNOTATION, task_instance_labels
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from tests.unit.fake_apiserver import FakeApiServer
from tests.unit.fakes import (
    FakeStateStore,
    FakeTI,
    FakeTrainingJobHook,
    ManualClock,
    failed_status,
    make_context,
    make_job,
    running_status,
    succeeded_status,
    with_hook,
)

DEPLOYMENT_LABEL = "disttrain.airflow.apache.org/deployment"
TASK_INSTANCE_LABEL = "disttrain.airflow.apache.org/task-instance"
RUN = "scheduled__2026-12-01T00:00:00+00:00"


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``deployment("prod")``: this process is now that Airflow deployment (as its configuration says)."""

    def become(deployment_id: str) -> None:
        monkeypatch.setenv("AIRFLOW__DISTTRAIN__DEPLOYMENT_ID", deployment_id)

    yield become


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> TrainingJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "image": "trainer:1",
        "num_workers": 1,
        "wait_policy": WaitPolicy(poll_interval=0.01, startup_timeout=2),
    }
    arguments.update(kwargs)
    return with_hook(TrainingJobOperator(**arguments), hook)


def submit(hook: FakeTrainingJobHook, ti: FakeTI, store: FakeStateStore | None = None) -> dict[str, Any]:
    """The task submits its job without waiting (as a job scaled and watched by a sensor later is)."""
    return make_operator(hook, wait_for_completion=False).execute(make_context(ti, store))


def as_if_waited_for(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` as a task that waits for it annotates it (its worker died mid-wait): a job nobody waits for
    is never an orphan, so only such a job tests whose orphan it is."""
    annotations = {**job["metadata"].get("annotations", {}), WAIT_FOR_COMPLETION_ANNOTATION: "true"}
    return {**job, "metadata": {**job["metadata"], "annotations": annotations}}


def legacy_labels(ti: FakeTI) -> dict[str, str]:
    """The labels the release before the deployment label put on a job: its key hashed no deployment."""
    identity = "\x1f".join((ti.dag_id, ti.task_id, ti.run_id, str(ti.map_index)))
    return {
        "disttrain.airflow.apache.org/dag-id": ti.dag_id,
        "disttrain.airflow.apache.org/task-id": ti.task_id,
        "disttrain.airflow.apache.org/try-number": "1",
        TASK_INSTANCE_LABEL: hashlib.sha256(identity.encode()).hexdigest()[:40],
    }


# -- two deployments -----------------------------------------------------------------------------------


@pytest.mark.parametrize("try_number", [1, 2])
def test_the_second_deployment_submits_its_own_job_and_leaves_the_first_ones_alone(
    deployment: Any, try_number: int
) -> None:
    hook = FakeTrainingJobHook()
    deployment("prod")
    prod = submit(hook, FakeTI(dag_id="nightly", run_id=RUN))
    hook.job(prod["name"])["status"] = running_status()

    deployment("staging")
    staging = submit(hook, FakeTI(dag_id="nightly", run_id=RUN, try_number=try_number))

    assert len(hook.called("create_job")) == 2  # staging's own, besides prod's
    assert staging["uid"] != prod["uid"] and staging["name"] != prod["name"]
    prod_job, staging_job = hook.job(prod["name"]), hook.job(staging["name"])
    assert prod_job["metadata"]["labels"][DEPLOYMENT_LABEL] != staging_job["metadata"]["labels"][DEPLOYMENT_LABEL]
    assert hook.called("delete_job") == [] and hook.called("patch_job") == []


class Airflow:
    """The cleanup task's ``ti``: Airflow's answer to ``get_task_states`` (one state for every run's task)."""

    def __init__(self, state: str) -> None:
        self.state = state

    def get_task_states(self, dag_id: str, task_ids: list[str], **filters: Any) -> dict[str, dict[str, str]]:
        return {RUN: {task: self.state for task in task_ids}}


@pytest.fixture
async def cluster(apiserver: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeApiServer:
    """The fake API server behind the default connection: the cleanup lists, patches and deletes through
    the real client, however it pages its LIST."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(apiserver.kubeconfig()))
    extra = {"kube_config_path": str(kubeconfig), "namespace": "default"}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return apiserver


async def cleanup(cluster: FakeApiServer, jobs: list[dict[str, Any]], task_state: str) -> dict[str, Any]:
    """Put ``jobs`` (running) in the cluster and run this deployment's cleanup once, with no grace period."""
    for job in jobs:
        await cluster.put({**job, "status": running_status()})
    operator = DeleteOrphanedTrainingJobsOperator(task_id="cleanup", kinds=["PyTorchJob"], grace_period=0)
    operator.clock = ManualClock(datetime(2026, 12, 1, 20, 0, tzinfo=timezone.utc).timestamp())
    return await asyncio.to_thread(operator.execute, {"ti": Airflow(task_state)})  # type: ignore[arg-type]


def names(cluster: FakeApiServer) -> set[str]:
    return {name for (_, plural, name) in cluster.objects if plural == "pytorchjobs"}


async def test_the_cleanup_of_one_deployment_keeps_the_running_job_of_the_other(
    cluster: FakeApiServer, deployment: Any
) -> None:
    hook = FakeTrainingJobHook()  # the jobs exactly as each deployment's operator makes them
    deployment("prod")
    prod = submit(hook, FakeTI(dag_id="nightly", run_id=RUN))
    deployment("staging")
    staging = submit(hook, FakeTI(dag_id="nightly", run_id=RUN))

    # Staging's task instance (the same DAG, task and run ids as prod's) has ended: its job is an orphan.
    report = await cleanup(cluster, [as_if_waited_for(job) for job in hook.jobs.values()], "success")

    assert names(cluster) == {prod["name"]}
    assert [entry["name"] for entry in report["deleted"]] == [staging["name"]]
    assert "another Airflow deployment" in json.dumps(report["kept"])


# -- jobs made before the deployment label ---------------------------------------------------------------


def test_a_retry_still_reattaches_to_the_running_job_the_previous_release_made(deployment: Any) -> None:
    deployment("prod")
    ti = FakeTI(dag_id="nightly", run_id=RUN, try_number=2)
    hook = FakeTrainingJobHook()
    legacy = make_job("train-legacy", uid="uid-legacy", status=running_status(), labels=legacy_labels(ti))
    hook.add_job(legacy, progression=[succeeded_status()])

    result = make_operator(hook).execute(make_context(ti, FakeStateStore()))

    assert hook.called("create_job") == []
    assert (result["name"], result["uid"], result["state"]) == ("train-legacy", "uid-legacy", "succeeded")


async def test_a_job_of_the_previous_release_is_still_cleaned_up_once_its_task_instance_ended(
    cluster: FakeApiServer, deployment: Any
) -> None:
    deployment("prod")
    legacy = make_job("train-legacy", uid="uid-legacy", labels=legacy_labels(FakeTI(dag_id="nightly", run_id=RUN)))

    report = await cleanup(cluster, [legacy], "failed")

    assert [entry["name"] for entry in report["deleted"]] == ["train-legacy"] and not names(cluster)


def test_a_legacy_key_on_a_job_of_another_deployment_is_not_taken_for_a_legacy_job(deployment: Any) -> None:
    """Only a job WITHOUT a deployment label is trusted on the key that named no deployment."""
    deployment("prod")
    ti = FakeTI(dag_id="nightly", run_id=RUN, try_number=2)
    hook = FakeTrainingJobHook()
    labels = {**legacy_labels(ti), DEPLOYMENT_LABEL: "0" * 40}
    hook.add_job(make_job("train-other", uid="uid-other", status=running_status(), labels=labels))

    submit(hook, ti, FakeStateStore())

    assert len(hook.called("create_job")) == 1


# -- the uid this task instance recorded -----------------------------------------------------------------


def recorded(name: str, uid: str) -> FakeStateStore:
    return FakeStateStore({STATE_STORE_KEY: {"kind": "PyTorchJob", "name": name, "namespace": "default", "uid": uid}})


def test_a_retry_does_not_adopt_a_copy_of_its_job_under_another_uid(deployment: Any) -> None:
    """A person copied the job (``kubectl get -o yaml | edit | apply``): same labels, another uid."""
    ti = FakeTI(try_number=2)
    hook = FakeTrainingJobHook()
    submit(hook, FakeTI())  # try 1's job, whose labels the copy carries
    original = hook.only_job()
    original["status"] = failed_status()
    copy = make_job("train-copy", uid="uid-copy", status=running_status(), labels=original["metadata"]["labels"])
    hook.add_job(copy)

    result = submit(hook, ti, recorded(original["metadata"]["name"], original["metadata"]["uid"]))

    assert len(hook.called("create_job")) == 2  # try 1's, and this try's own
    assert result["name"] not in ("train-copy", original["metadata"]["name"])
    assert hook.called("delete_job") == []


def test_an_explicitly_named_retry_refuses_a_copy_under_its_name_instead_of_reattaching() -> None:
    """Try 1's job was deleted and a copy carrying its labels applied under the same name, another uid."""
    hook = FakeTrainingJobHook()
    ti = FakeTI(try_number=2)
    labels = task_instance_labels(ti.dag_id, ti.task_id, ti.run_id, ti.map_index, 1)
    hook.add_job(make_job("train-x", uid="uid-copy", status=running_status(), labels=labels))

    with pytest.raises(JobAlreadyExistsError, match="is not the job it recorded"):
        make_operator(hook, job_name="train-x", wait_for_completion=False).execute(
            make_context(ti, recorded("train-x", "uid-1"))
        )

    assert hook.called("create_job") == [] and hook.called("delete_job") == []


def test_a_timed_out_deferral_does_not_delete_a_copy_under_its_job_name() -> None:
    """Our job was deleted and a copy carrying its labels applied under its name: not the recorded uid."""
    hook = FakeTrainingJobHook()
    ti = FakeTI()
    submit(hook, ti)
    ours = hook.only_job()
    name, uid = ours["metadata"]["name"], ours["metadata"]["uid"]
    hook.forget(name)
    hook.add_job(make_job(name, uid="uid-copy", status=running_status(), labels=ours["metadata"]["labels"]))

    with pytest.raises(TaskDeferralTimeout):
        make_operator(hook, deferrable=True).resume_execution(
            TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, make_context(ti, recorded(name, uid))
        )

    assert hook.called("delete_job") == []
    assert hook.job(name)["metadata"]["uid"] == "uid-copy"


def test_a_timeout_is_not_settled_by_another_job_that_now_has_the_name() -> None:
    """The trigger timed out on our job; since, another job of that name has succeeded: its result is not ours."""
    hook = FakeTrainingJobHook()
    ti = FakeTI()
    ref = JobRef("PyTorchJob", "train-abc", "default", "uid-ours")
    hook.add_job(make_job("train-abc", uid="uid-other", status=succeeded_status(), labels={"team": "another"}))
    event = make_outcome(ref, TIMEOUT, f"{ref.title} did not start within 0:00:02")
    operator = make_operator(hook, deferrable=True, cleanup_policy=CleanupPolicy(on_timeout=True))

    with pytest.raises(JobTimeoutError) as raised:
        operator.execute_complete(make_context(ti, recorded("train-abc", "uid-ours")), event, job_uid="uid-ours")

    assert "was deleted" not in str(raised.value)
    assert hook.job("train-abc")["metadata"]["uid"] == "uid-other"
