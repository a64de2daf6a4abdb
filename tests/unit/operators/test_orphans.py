"""The orphan cleanup against a Kubernetes API server (the fake one, over HTTP, through the real sync
client and the cncf connection) and Airflow's answer to ``get_task_states`` (shaped as the execution
API's route answers it): what it deletes, marks and keeps, and what it reports."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_disttrain.hooks import training_job as training_job_hook
from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
from airflow_provider_disttrain.operators.orphans import DeleteOrphanedTrainingJobsOperator
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.ownership import naming, orphans
from airflow_provider_disttrain.ownership.naming import task_instance_labels
from airflow_provider_disttrain.ownership.orphans import ORPHANED_SINCE_ANNOTATION
from tests.unit.fake_apiserver import FakeApiServer
from tests.unit.fakes import FakeTI, ManualClock, make_context, make_job, running_status, succeeded_status

RUN = "scheduled__2026-12-01T00:00:00+00:00"
OTHER_RUN = "manual__2026-12-01T12:34:56.789+00:00"
NOW = datetime(2026, 12, 1, 20, 0, tzinfo=timezone.utc)


class TaskStates:
    """Airflow's side: task instance states by (dag, task, run, map index), answered as
    ``airflow/api_fastapi/execution_api/routes/task_instances.py`` ``get_task_instance_states`` does."""

    def __init__(self, states: dict[tuple[str, str, str, int], str | None]) -> None:
        self.states = states
        self.requests: list[dict[str, Any]] = []

    def get_task_states(
        self, dag_id: str, map_index: int | None = None, task_ids: list[str] | None = None, **filters: Any
    ) -> dict[str, Any]:
        self.requests.append({"dag_id": dag_id, "map_index": map_index, "task_ids": task_ids, **filters})
        answer: dict[str, dict[str, str | None]] = {}
        for (dag, task, run, index), state in self.states.items():
            if dag == dag_id and (not task_ids or task in task_ids) and map_index in (None, index):
                answer.setdefault(run, {})[task if index < 0 else f"{task}_{index}"] = state
        return answer


def job_of(
    name: str, dag: str, task: str, run: str, map_index: int = -1, *, kind: str = "PyTorchJob", **fields: Any
) -> dict[str, Any]:
    labels = task_instance_labels(dag, task, run, map_index, try_number=1)
    return make_job(name, "ml", kind, uid=f"uid-{name}", labels=labels, **fields)


@pytest.fixture
async def cluster(apiserver: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeApiServer:
    """The fake API server behind the default connection (namespace ``ml``), as a deployment defines it."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(apiserver.kubeconfig()))
    extra = {"kube_config_path": str(kubeconfig), "namespace": "ml"}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes", "extra": extra}))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return apiserver


Run = Callable[..., Any]


@pytest.fixture
def run_cleanup() -> Run:
    async def run(airflow: TaskStates, *, now: datetime = NOW, **params: Any) -> dict[str, Any]:
        operator = DeleteOrphanedTrainingJobsOperator(task_id="delete_orphaned_jobs", **params)
        operator.clock = ManualClock(now.timestamp())
        # The operator's sync client talks to the fake server, whose event loop is this test's.
        return await asyncio.to_thread(operator.execute, {"ti": airflow})  # type: ignore[arg-type]

    return run


def names(cluster: FakeApiServer, plural: str = "pytorchjobs") -> set[str]:
    return {name for (_, kind, name) in cluster.objects if kind == plural}


async def test_deletes_the_unfinished_jobs_of_ended_task_instances_and_keeps_every_other(
    cluster: FakeApiServer, run_cleanup: Run
) -> None:
    await cluster.put(job_of("killed", "nightly", "train", RUN, status=running_status()))
    await cluster.put(job_of("running-task", "nightly", "evaluate", RUN, status=running_status()))
    await cluster.put(
        job_of("deferred-task", "sweep", "trial", RUN, 2, kind="MPIJob", status=running_status()), "mpijobs"
    )
    await cluster.put(job_of("kept-finished", "nightly", "train", OTHER_RUN, status=succeeded_status()))
    await cluster.put(job_of("unknown-run", "nightly", "train", "manual__deleted-run", status=running_status()))
    await cluster.put(make_job("not-ours", "ml", uid="u-x", labels={"team": "research"}, status=running_status()))
    airflow = TaskStates(
        {
            ("nightly", "train", RUN, -1): "failed",
            ("nightly", "train", OTHER_RUN, -1): "success",
            ("nightly", "evaluate", RUN, -1): "running",
            ("sweep", "trial", RUN, 1): "failed",
            ("sweep", "trial", RUN, 2): "deferred",
        }
    )

    report = await run_cleanup(airflow, grace_period=0)

    assert names(cluster) == {"running-task", "kept-finished", "unknown-run", "not-ours"}
    assert names(cluster, "mpijobs") == {"deferred-task"}
    [deleted] = report["deleted"]
    assert deleted | {"reason": None} == {
        "kind": "PyTorchJob",
        "name": "killed",
        "uid": "uid-killed",
        "dag_id": "nightly",
        "task_id": "train",
        "map_index": -1,
        "run_id": RUN,
        "task_state": "failed",
        "reason": None,
    }
    # Kept jobs are counted by reason, not listed.
    assert report["kept"] == {orphans.KEPT_ACTIVE: 2, orphans.KEPT_FINISHED: 1, orphans.KEPT_UNKNOWN: 1}
    assert (report["namespace"], report["report_only"], report["marked"], report["unmarked"]) == ("ml", False, [], [])
    assert report["errors"] == []
    # The delete was pinned to the job's uid.
    assert cluster.count("delete") == 1


async def test_asks_airflow_once_per_task_however_many_jobs_it_has(cluster: FakeApiServer, run_cleanup: Run) -> None:
    for index in range(5):
        await cluster.put(job_of(f"shard-{index}", "sweep", "trial", RUN, index, status=running_status()))
    airflow = TaskStates({("sweep", "trial", RUN, index): "success" for index in range(5)})

    report = await run_cleanup(airflow, grace_period=0)

    assert len(report["deleted"]) == 5 and not names(cluster)
    assert airflow.requests == [{"dag_id": "sweep", "map_index": None, "task_ids": ["trial"]}]


async def test_the_grace_period_starts_when_a_run_first_finds_the_orphan(
    cluster: FakeApiServer, run_cleanup: Run
) -> None:
    await cluster.put(job_of("killed", "nightly", "train", RUN, status=running_status()))
    airflow = TaskStates({("nightly", "train", RUN, -1): "failed"})

    first = await run_cleanup(airflow, grace_period=timedelta(hours=1))
    assert [entry["name"] for entry in first["marked"]] == ["killed"]
    marked = cluster.objects[("ml", "pytorchjobs", "killed")]["metadata"]["annotations"][ORPHANED_SINCE_ANNOTATION]
    assert datetime.fromisoformat(marked) == NOW

    # 59 minutes later it is still within the grace period; at one hour it is deleted.
    second = await run_cleanup(airflow, now=NOW + timedelta(minutes=59), grace_period="3600")
    assert second["kept"] == {orphans.KEPT_IN_GRACE: 1} and second["marked"] == [] and names(cluster) == {"killed"}
    third = await run_cleanup(airflow, now=NOW + timedelta(hours=1), grace_period="3600")
    assert [entry["name"] for entry in third["deleted"]] == ["killed"] and not names(cluster)


async def test_a_task_cleared_during_the_grace_period_gets_its_job_unmarked(
    cluster: FakeApiServer, run_cleanup: Run
) -> None:
    await cluster.put(job_of("killed", "nightly", "train", RUN, status=running_status()))
    airflow = TaskStates({("nightly", "train", RUN, -1): "failed"})
    await run_cleanup(airflow, grace_period=timedelta(hours=1))

    airflow.states[("nightly", "train", RUN, -1)] = "running"  # cleared: the new try reattached to the job
    report = await run_cleanup(airflow, now=NOW + timedelta(hours=2), grace_period=timedelta(hours=1))

    assert [entry["name"] for entry in report["unmarked"]] == ["killed"]
    assert ORPHANED_SINCE_ANNOTATION not in cluster.objects[("ml", "pytorchjobs", "killed")]["metadata"]["annotations"]


async def test_report_only_changes_nothing_and_says_what_it_would_delete(
    cluster: FakeApiServer, run_cleanup: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    await cluster.put(job_of("killed", "nightly", "train", RUN, status=running_status()))
    airflow = TaskStates({("nightly", "train", RUN, -1): "failed"})

    report = await run_cleanup(airflow, grace_period=0, report_only="True")

    assert report["report_only"] is True and [entry["name"] for entry in report["deleted"]] == ["killed"]
    assert names(cluster) == {"killed"} and cluster.count("delete") == cluster.count("patch") == 0
    # The task log (Airflow's structlog output) names the job and why.
    assert "would delete PyTorchJob ml/killed: task instance (run scheduled__" in capsys.readouterr().out


async def test_a_kind_whose_crd_is_not_installed_is_skipped(cluster: FakeApiServer, run_cleanup: Run) -> None:
    await cluster.put(job_of("killed", "nightly", "train", RUN, status=running_status()))
    cluster.fail_next("list", 404, reason="NotFound")  # the first kind listed: TrainJob

    report = await run_cleanup(
        TaskStates({("nightly", "train", RUN, -1): "failed"}), grace_period=0, kinds=["TrainJob", "PyTorchJob"]
    )

    assert [entry["name"] for entry in report["deleted"]] == ["killed"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"grace_period": "an hour"}, "grace_period: expected a timedelta or seconds, got 'an hour'"),
        ({"grace_period": -5}, "grace_period: must be zero or more seconds, got -5"),
        ({"report_only": "yes"}, "report_only: expected true or false, got 'yes'"),
    ],
)
async def test_bad_policy_values_are_refused_before_any_request(
    cluster: FakeApiServer, run_cleanup: Run, params: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await run_cleanup(TaskStates({}), **params)
    assert cluster.requests == []


async def test_a_job_submitted_without_waiting_is_kept_while_its_sensor_waits(
    cluster: FakeApiServer, run_cleanup: Run
) -> None:
    """example_dags/elastic_pytorch.py: the task submits and succeeds; a deferred sensor waits for the job."""
    ti = FakeTI(dag_id="elastic_pytorch", task_id="submit", run_id=RUN)
    submit = TrainingJobOperator(task_id="submit", image="trainer:1", num_workers=1, wait_for_completion=False)
    submitted = await asyncio.to_thread(submit.execute, make_context(ti))  # type: ignore[arg-type]
    job = cluster.objects[("ml", "pytorchjobs", submitted["name"])]
    assert job["metadata"]["annotations"] == {
        naming.DAG_ID_ANNOTATION: "elastic_pytorch",
        naming.TASK_ID_ANNOTATION: "submit",
        naming.WAIT_FOR_COMPLETION_ANNOTATION: "false",
    }
    await cluster.put({**job, "status": running_status()})
    airflow = TaskStates({("elastic_pytorch", "submit", RUN, -1): "success"})

    for hours in (0, 1, 2):  # the grace period is no excuse: it is never marked
        report = await run_cleanup(airflow, now=NOW + timedelta(hours=hours), grace_period=timedelta(minutes=30))
        assert (report["marked"], report["deleted"], report["kept"]) == ([], [], {orphans.KEPT_NOT_WAITED_FOR: 1})

    assert names(cluster) == {submitted["name"]} and cluster.count("patch") == cluster.count("delete") == 0


@pytest.mark.parametrize(
    "dag_id", ["nightly_retraining_of_the_recommendation_model_for_every_market_eu", "_etl", "données"]
)
async def test_orphans_of_dag_ids_a_label_cannot_hold_are_found(
    cluster: FakeApiServer, run_cleanup: Run, dag_id: str
) -> None:
    job = job_of("killed", dag_id, "train", RUN, status=running_status())
    job["metadata"]["annotations"] = naming.task_instance_annotations(dag_id, "train", wait_for_completion=True)
    await cluster.put(job)
    airflow = TaskStates({(dag_id, "train", RUN, -1): "failed"})

    report = await run_cleanup(airflow, grace_period=0)

    assert [entry["dag_id"] for entry in report["deleted"]] == [dag_id] and not names(cluster)
    assert [request["dag_id"] for request in airflow.requests] == [dag_id]


async def test_a_job_gone_between_the_list_and_its_mark_is_counted_and_the_run_goes_on(
    cluster: FakeApiServer, run_cleanup: Run
) -> None:
    await cluster.put(job_of("gone", "nightly", "train", RUN, status=running_status()))
    await cluster.put(job_of("killed", "nightly", "train", OTHER_RUN, status=running_status()))
    airflow = TaskStates({("nightly", "train", RUN, -1): "failed", ("nightly", "train", OTHER_RUN, -1): "failed"})
    cluster.fail_next("patch", 404, reason="NotFound")  # the first job marked ("gone"): deleted since the LIST

    report = await run_cleanup(airflow, grace_period=timedelta(hours=1))

    assert [entry["name"] for entry in report["marked"]] == ["killed"]
    [error] = report["errors"]
    assert (error["name"], error["action"]) == ("gone", "mark") and "404" in error["error"]
    assert ORPHANED_SINCE_ANNOTATION in cluster.objects[("ml", "pytorchjobs", "killed")]["metadata"]["annotations"]


@pytest.mark.parametrize("grace_period", [timedelta(hours=1), timedelta(0)], ids=["mark", "delete"])
async def test_a_job_replaced_under_its_name_after_the_list_is_left_alone(
    cluster: FakeApiServer, run_cleanup: Run, monkeypatch: pytest.MonkeyPatch, grace_period: timedelta
) -> None:
    """A retry's new job of the same name is not the orphan that was listed: the uid precondition refuses (409)."""
    await cluster.put(job_of("killed", "nightly", "train", RUN, status=running_status()))
    await cluster.put(job_of("other", "nightly", "train", OTHER_RUN, status=running_status()))
    airflow = TaskStates({("nightly", "train", RUN, -1): "failed", ("nightly", "train", OTHER_RUN, -1): "failed"})
    loop, listed = asyncio.get_running_loop(), TrainingJobHook.job_pages

    def replaced_after_the_list(self: TrainingJobHook, kind: str, *args: Any, **kwargs: Any) -> Any:
        yield from listed(self, kind, *args, **kwargs)
        if kind == "PyTorchJob":
            replacement = job_of("killed", "nightly", "train", RUN, status=running_status())
            replacement["metadata"]["uid"] = "uid-of-the-retry"
            asyncio.run_coroutine_threadsafe(cluster.put(replacement), loop).result(timeout=10)

    monkeypatch.setattr(TrainingJobHook, "job_pages", replaced_after_the_list)

    report = await run_cleanup(airflow, grace_period=grace_period)

    action = "mark" if grace_period else "delete"
    assert [(error["name"], error["action"]) for error in report["errors"]] == [("killed", action)]
    assert [entry["name"] for entry in report["marked" if grace_period else "deleted"]] == ["other"]
    replacement = cluster.objects[("ml", "pytorchjobs", "killed")]
    assert replacement["metadata"]["uid"] == "uid-of-the-retry"
    assert ORPHANED_SINCE_ANNOTATION not in (replacement["metadata"].get("annotations") or {})


async def test_the_list_is_paged_and_finished_jobs_are_counted_not_listed(
    cluster: FakeApiServer, run_cleanup: Run, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for index in range(7):
        await cluster.put(job_of(f"done-{index}", "history", "train", f"{RUN}-{index}", status=succeeded_status()))
    await cluster.put(job_of("killed", "nightly", "train", RUN, status=running_status()))
    airflow = TaskStates({("nightly", "train", RUN, -1): "failed"})
    monkeypatch.setattr(training_job_hook, "LIST_PAGE_SIZE", 3)

    report = await run_cleanup(airflow, grace_period=0, kinds=["PyTorchJob"])

    lists = cluster.queries("list")
    assert [query.get("limit") for query in lists] == ["3", "3", "3"] and "continue" in lists[-1]
    assert [entry["name"] for entry in report["deleted"]] == ["killed"]
    assert report["kept"] == {orphans.KEPT_FINISHED: 7}
    # Airflow is asked only about the jobs that may be orphans, and nothing names the finished ones.
    assert [request["dag_id"] for request in airflow.requests] == ["nightly"]
    assert "done-" not in json.dumps(report) and "done-" not in capsys.readouterr().out
