"""A misspelt field is refused by the real API server (fieldValidation=Strict), never dropped silently.

Without Strict the API server prunes fields its schema does not know and stores the job without
them: a ``runPolicy.cleanPodPolicyy`` would leave the pods running after the job. These tests send
such manifests and patches through the provider, as the documented Role's service account.
"""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
from tests.integration.conftest import training_dag, unique_dag_id


def job_manifest(name: str, run_policy: dict | None = None, **container: object) -> dict:
    replica = {
        "replicas": 1,
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "busybox:1.36", **container}]}},
    }
    spec: dict = {"pytorchReplicaSpecs": {"Master": replica}}
    if run_policy is not None:
        spec["runPolicy"] = run_policy
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name}, "spec": spec}


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        (job_manifest("typo-run-policy", {"cleanPodPolicyy": "All"}), "spec.runPolicy.cleanPodPolicyy"),
        (
            job_manifest("typo-container", imagePullPolcy="Always"),
            "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].imagePullPolcy",
        ),
    ],
    ids=["runPolicy", "container"],
)
@pytest.mark.parametrize("dry_run", [False, True], ids=["create", "dry-run"])
def test_a_misspelt_field_is_refused_and_named(namespace, jobs, manifest, field, dry_run):
    hook = TrainingJobHook(conn_id="kubernetes_default")

    with pytest.raises(InvalidJobSpecError) as raised:
        hook.create_job("PyTorchJob", manifest, namespace, dry_run=dry_run)

    assert raised.value.field == field
    assert f"create PyTorchJob {namespace}/{manifest['metadata']['name']}" in raised.value.problem
    assert jobs.list("pytorchjobs", namespace) == []


def test_a_schema_violation_is_named(namespace, jobs):
    hook = TrainingJobHook(conn_id="kubernetes_default")

    with pytest.raises(InvalidJobSpecError) as raised:
        hook.create_job("PyTorchJob", job_manifest("bad-type", {"backoffLimit": "three"}), namespace)

    assert raised.value.field == "spec.runPolicy.backoffLimit"
    assert jobs.list("pytorchjobs", namespace) == []


def test_a_misspelt_field_in_a_patch_is_refused_and_the_job_left_as_it_was(namespace, jobs):
    hook = TrainingJobHook(conn_id="kubernetes_default")
    hook.create_job("PyTorchJob", job_manifest("patched", {"suspend": True}), namespace)

    with pytest.raises(InvalidJobSpecError) as raised:
        hook.patch_job("PyTorchJob", "patched", namespace, {"spec": {"runPolicy": {"suspended": False}}})

    assert raised.value.field == "spec.runPolicy.suspended"
    assert jobs.get("pytorchjobs", namespace, "patched")["spec"]["runPolicy"] == {"suspend": True}


def test_a_dag_whose_manifest_has_a_misspelt_field_fails_without_creating_a_job(namespace, run_dag, jobs):
    dag_id = unique_dag_id("typo")
    manifest = job_manifest("typo", {"cleanPodPolicyy": "All"})

    result = run_dag(dag_id, training_dag(dag_id, job_manifest=manifest, num_workers=1))

    assert result.task_state("train") == "failed"
    assert jobs.list("pytorchjobs", namespace) == []
