"""The hook reads the evidence of a failure; the failure modules say what to read and judge it
(``diagnostics.event_objects``, ``logs_to_read``, ``failure_class.diagnose``)."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_provider_disttrain
from airflow_provider_disttrain.failures.diagnostics import MAX_EVENT_PODS, Evidence, event_objects, logs_to_read
from airflow_provider_disttrain.failures.failure_class import FailureClass, diagnose
from airflow_provider_disttrain.job.kinds import get_job_kind
from tests.unit.fakes import OOM_KILLED, failed_status, make_event, make_job, make_pod

PYTORCH = get_job_kind("PyTorchJob")


def test_the_failure_is_explained_and_classed_from_the_same_evidence() -> None:
    pods = (
        make_pod("train-abc", "master", 0, phase="Failed", terminated=OOM_KILLED),
        make_pod("train-abc", "worker", 0),
    )
    evidence = Evidence(
        pods=pods,
        events=(make_event("train-abc-master-0", "BackOff", "Back-off restarting failed container"),),
        log_tails={"train-abc-master-0": "epoch 1\nallocating 80GiB\n"},
    )
    job = make_job("train-abc", status=failed_status())

    message, cause = diagnose(PYTORCH, "PyTorchJob default/train-abc", "failed", "it failed", job, evidence)

    assert message.splitlines()[0] == "it failed"
    assert "OOMKilled, exit code 137" in message and "  | allocating 80GiB" in message.splitlines()
    assert "train-abc-master-0: BackOff: Back-off restarting failed container" in message
    assert cause.failure_class is FailureClass.TRAINING and cause.reason == "OOMKilled"


def test_without_evidence_the_headline_and_the_jobs_condition_stand() -> None:
    job = make_job("train-abc", status=failed_status(reason="OOM", message="replica master-0 was OOMKilled"))

    message, cause = diagnose(PYTORCH, "PyTorchJob default/train-abc", "failed", "it failed", job, Evidence())

    assert message == "it failed\nFailed condition: OOM: replica master-0 was OOMKilled"
    assert cause.describe().startswith("Failure class:")


def test_what_to_read_is_the_failure_modules_choice() -> None:
    failed = make_pod("train-abc", "master", 0, phase="Failed", terminated=OOM_KILLED)
    running = make_pod("train-abc", "worker", 0)
    waiting = [make_pod("train-abc", "worker", index, phase="Pending") for index in range(1, MAX_EVENT_PODS + 5)]

    names = event_objects(PYTORCH, "train-abc", [failed, running, *waiting])

    assert {"train-abc", "train-abc-master-0"} <= names and "train-abc-worker-0" not in names
    assert len(names - {"train-abc", *("train-abc" + s for s in PYTORCH.event_object_suffixes)}) == MAX_EVENT_PODS
    assert logs_to_read([failed, running]) == [("train-abc-master-0", "pytorch", False)]


def test_no_hook_judges_a_failure() -> None:
    """The hooks read; the judgement (``failure_class.classify``, ``diagnostics.explain``) is imported
    only inside ``failures/``: every other module goes through ``diagnose``."""
    package = Path(airflow_provider_disttrain.__file__).parent
    judges = {"classify", "explain"}
    importers = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("airflow_provider_disttrain.failures.")
        and judges & {alias.name for alias in node.names}
    }
    assert importers and all(importer.startswith("failures/") for importer in importers), importers
