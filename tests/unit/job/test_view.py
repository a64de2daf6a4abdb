"""``JobView``: one look at a job, read once, and what the wait loops take from it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import airflow_provider_disttrain
from airflow_provider_disttrain.job.deadlines import Deadlines
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.outcome import TIMEOUT, JobRef
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kueue.hold import QUEUE_NAME_LABEL
from tests.unit.fakes import START, condition, make_job, running_status, succeeded_status

REF = JobRef("MPIJob", "train-abc", "default", "uid-1")
# The mpi-operator writes Running=False on every suspension: a suspended MPIJob's conditions cannot say it ran.
SUSPENDED_MPIJOB = {
    "conditions": [
        condition("Created", START, reason="MPIJobCreated"),
        condition("Suspended", START, reason="MPIJobSuspended"),
        condition("Running", START, status="False", reason="MPIJobSuspended"),
    ]
}
HELD = {"conditions": [condition("Created", START), condition("Suspended", START, reason="PyTorchJobSuspended")]}


def mpijob(status: dict[str, Any]) -> dict[str, Any]:
    return make_job(kind="MPIJob", status=status, created=START)


def test_a_view_reads_the_state_kind_replicas_and_times_of_its_job() -> None:
    view = JobView.observe(REF, make_job(kind="MPIJob", status=succeeded_status(leader="Launcher")))

    assert (view.state, view.is_terminal, view.has_run, view.hold) == (JobState.SUCCEEDED, True, True, None)
    assert view.kind is get_job_kind("MPIJob")
    assert view.replicas["Launcher"]["succeeded"] == 1
    assert view.times == (succeeded_status()["startTime"], succeeded_status()["completionTime"])
    assert (view.uid, view.version) == ("uid-1", "100")


def test_what_a_view_saw_run_stays_run_though_the_jobs_conditions_forget_it() -> None:
    """A suspended MPIJob that ran looks like one that never did; the view of the look before knows."""
    never_seen_running = JobView.observe(REF, mpijob(SUSPENDED_MPIJOB))
    running = JobView.observe(REF, mpijob(running_status(leader="Launcher")), previous=never_seen_running)
    suspended = JobView.observe(REF, mpijob(SUSPENDED_MPIJOB), previous=running)
    gone = JobView.observe(REF, None, previous=suspended)

    assert (never_seen_running.has_run, running.has_run, suspended.has_run) == (False, True, True)
    assert (suspended.state, gone.found, gone.state, gone.has_run) == (JobState.SUSPENDED, False, None, True)
    # So the startup deadline, which applies until a job first runs, does not come back with the suspension.
    deadlines = Deadlines(startup=0.0)
    assert deadlines.judge(suspended, now=1.0) is None
    assert deadlines.wake_in(suspended, now=1.0) is None
    outcome = deadlines.judge(never_seen_running, now=1.0)
    assert outcome is not None and outcome["status"] == TIMEOUT and outcome["state"] == "suspended"


def test_kueues_word_is_kept_only_for_a_job_kueue_holds() -> None:
    ref = JobRef("PyTorchJob", "train-abc", "default", "uid-1")
    held = make_job(status=HELD, labels={QUEUE_NAME_LABEL: "user-queue"}, created=START)

    view = JobView.observe(ref, held, waiting_reason="quota reserved: no")
    admitted = JobView.observe(ref, make_job(status=running_status()), waiting_reason="stale word")

    assert view.hold is not None and view.waiting_reason == "quota reserved: no"
    assert (admitted.hold, admitted.waiting_reason, admitted.never_admitted) == (None, None, None)
    outcome = Deadlines(queue=0.0).judge(view, now=1.0)
    assert outcome is not None and "Kueue: quota reserved: no" in outcome["message"]


# MultiKueue: the manager's job is unsuspended when its Workload is dispatched; no controller writes its
# conditions (they come from the worker, later), and a job that fails at once has its pods deleted on the
# worker before the manager shows it running. Where its pods are is looked at from the unsuspension on.
DISPATCHED_SPEC = {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}, "runPolicy": {"suspend": False}}
QUEUED_SPEC = {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}, "runPolicy": {"suspend": True}}


@pytest.mark.parametrize(
    ("spec", "status", "labelled", "expected"),
    [
        (QUEUED_SPEC, {}, True, False),  # Kueue still holds it: no worker has it
        (DISPATCHED_SPEC, {}, True, True),  # dispatched: the worker's pods may run, the manager says nothing yet
        (DISPATCHED_SPEC, {"conditions": [condition("Created", START)]}, True, True),
        (DISPATCHED_SPEC, succeeded_status(), True, False),  # over: its pods are gone or kept already
        (DISPATCHED_SPEC, {}, False, False),  # no queue: nothing dispatches it
        (QUEUED_SPEC, running_status(), False, True),  # running is running, wherever
    ],
    ids=["held", "dispatched", "created", "ended", "unqueued", "running"],
)
def test_a_job_may_have_pods_on_a_worker_from_the_moment_kueue_lets_it_go(
    spec: dict[str, Any], status: dict[str, Any], labelled: bool, expected: bool
) -> None:
    labels = {QUEUE_NAME_LABEL: "multikueue"} if labelled else {}
    job = make_job(spec=spec, status=status, labels=labels, created=START)

    view = JobView.observe(JobRef("PyTorchJob", "train-abc", "default", "uid-1"), job)

    assert view.may_have_pods_elsewhere is expected


def _callers_of(function: str) -> list[str]:
    """The modules of the package that call ``function`` by name (its definition aside)."""
    package = Path(airflow_provider_disttrain.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == function:
                found.append(str(path.relative_to(package)))
    return found


def test_only_the_view_builder_reads_a_jobs_state_from_its_conditions() -> None:
    """Every path that reads a job (the waits, the submit, the ending, the cleanup, the UI) builds one
    ``JobView`` and reads its state there; none re-derives it from the dict (issue 27)."""
    assert _callers_of("job_state") == ["job/view.py"]
    # The kind entry too is looked up once per look, by the builder; the two other lookups read a job outside
    # a look (a spec before the deferral; a bare job given to ``seconds_to_deadline``), each says why.
    assert set(_callers_of("kind_of")) == {"job/view.py", "job/gpus.py", "job/outcome.py"}


def test_a_view_of_a_job_read_outside_a_wait_takes_its_ref_from_the_job() -> None:
    job = make_job(kind="MPIJob", status=succeeded_status(leader="Launcher"))
    metadata = job["metadata"]

    view = JobView.of(job)

    assert view.ref == JobRef("MPIJob", metadata["name"], metadata["namespace"], metadata.get("uid"))
    assert view.state is JobState.SUCCEEDED and view.kind is get_job_kind("MPIJob")
    assert view.describe().startswith("succeeded (Succeeded")
    result = view.result()
    assert result["kind"] == "MPIJob" and result["state"] == "succeeded" and result["name"] == metadata["name"]
    # The task's kind, when given, names the result (a job object whose ``kind`` field was trimmed).
    assert view.result("TFJob")["kind"] == "TFJob"


def test_a_view_of_no_job_describes_it_as_not_started_and_has_no_result() -> None:
    gone = JobView.observe(REF, None)

    assert gone.describe() == "queued (no conditions yet)"
    with pytest.raises(ValueError, match="train-abc"):
        gone.result()
