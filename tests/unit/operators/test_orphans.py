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

from airflow_provider_disttrain.naming import task_instance_labels
from airflow_provider_disttrain.operators.orphans import DeleteOrphanedTrainingJobsOperator
from airflow_provider_disttrain.orphans import ORPHANED_SINCE_ANNOTATION
from tests.unit.fake_apiserver import FakeApiServer
from tests.unit.fakes import make_job, running_status, succeeded_status

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
        operator.clock = lambda: now
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
    kept = {entry["name"]: entry["reason"] for entry in report["kept"]}
    assert set(kept) == {"running-task", "deferred-task", "kept-finished", "unknown-run"}
    assert "running" in kept["running-task"] and "deferred" in kept["deferred-task"]
    assert "succeeded" in kept["kept-finished"] and "no task instance" in kept["unknown-run"]
    assert (report["namespace"], report["report_only"], report["marked"], report["unmarked"]) == ("ml", False, [], [])
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
    assert [entry["name"] for entry in second["kept"]] == ["killed"] and names(cluster) == {"killed"}
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
