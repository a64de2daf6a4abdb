"""What a shared watch keeps of an object (``trimmed``) and how it tells a refusal from an outage."""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.hooks.watch_values import WatchProblem, trimmed
from tests.unit.fakes import make_job, running_status


def test_a_trimmed_job_keeps_its_identity_labels_and_status_and_drops_the_rest() -> None:
    job = make_job(status=running_status(), labels={"team": "ml"}, spec={"pytorchReplicaSpecs": {"Master": {}}})
    job["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    job["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{...}"}

    kept = trimmed(job)

    assert set(kept) == {"apiVersion", "kind", "metadata", "status"}
    assert kept["status"] == running_status()
    assert kept["metadata"] == {
        "name": "train-abc",
        "namespace": "default",
        "uid": "uid-1",
        "resourceVersion": "100",
        "creationTimestamp": job["metadata"]["creationTimestamp"],
        "labels": job["metadata"]["labels"],
    }


def test_a_job_being_deleted_keeps_its_deletion_timestamp() -> None:
    job = make_job()
    job["metadata"]["deletionTimestamp"] = "2024-05-01T10:10:05Z"

    assert trimmed(job)["metadata"]["deletionTimestamp"] == "2024-05-01T10:10:05Z"


@pytest.mark.parametrize(("status", "denied"), [(401, True), (403, True), (404, False), (500, False), (None, False)])
def test_only_401_and_403_are_a_refusal(status: int | None, denied: bool) -> None:
    assert WatchProblem(error=OSError("x"), since=0.0, status=status, fatal=False).denied is denied
