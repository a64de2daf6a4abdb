"""``ClusterConnection``: the value a task hands its trigger, stored whole, and the kubeconfig cut to one context.

How the hooks build and read it is tested in hooks/test_training_job.py and hooks/test_cluster_client.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.kube.connection import ClusterConnection, minimal_kubeconfig

KUBECONFIG: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "dev",
    "clusters": [{"name": "dev-cluster", "cluster": {"server": "https://dev"}}, {"name": "prod-cluster"}],
    "contexts": [
        {"name": "dev", "context": {"cluster": "dev-cluster", "user": "dev-user"}},
        {"name": "prod", "context": {"cluster": "prod-cluster", "user": "prod-user"}},
        {"name": "anonymous", "context": {"cluster": "dev-cluster"}},
    ],
    "users": [{"name": "dev-user", "user": {"token": "dev-token"}}, {"name": "prod-user", "user": {"token": "prod"}}],
}


def test_a_connection_comes_back_whole_from_what_it_stored() -> None:
    connection = ClusterConnection("k8s", "prod", kubeconfig=minimal_kubeconfig(KUBECONFIG, "prod")[0], extras={"a": 1})

    assert ClusterConnection.from_dict(connection.to_dict()) == connection


def test_an_unknown_stored_key_is_refused_unless_a_newer_version_may_have_written_it() -> None:
    stored = {**ClusterConnection("k8s").to_dict(), "conn_idd": "typo"}

    with pytest.raises(ValueError, match=r"unknown keys \['conn_idd'\]"):
        ClusterConnection.from_dict(stored)
    assert ClusterConnection.from_dict(stored, ignore_unknown=True) == ClusterConnection("k8s")


def test_the_same_cluster_reached_the_same_way_has_one_identity() -> None:
    assert ClusterConnection("k8s", "dev").identity == ClusterConnection("k8s", "dev").identity
    assert ClusterConnection("k8s", "dev").identity != ClusterConnection("k8s", "prod").identity


def test_the_kubeconfig_travels_with_the_one_context_its_cluster_and_its_user_only() -> None:
    minimal, name = minimal_kubeconfig(KUBECONFIG, "prod")

    assert name == "prod"
    assert minimal["current-context"] == "prod"
    assert [entry["name"] for entry in minimal["contexts"]] == ["prod"]
    assert [entry["name"] for entry in minimal["clusters"]] == ["prod-cluster"]
    assert minimal["users"] == [{"name": "prod-user", "user": {"token": "prod"}}]  # dev-token stays behind


def test_without_a_context_the_current_one_travels_and_a_context_without_a_user_takes_none() -> None:
    assert minimal_kubeconfig(KUBECONFIG, None)[1] == "dev"
    assert minimal_kubeconfig(KUBECONFIG, "anonymous")[0]["users"] == []


@pytest.mark.parametrize(
    ("kubeconfig", "context", "words"),
    [
        ({**KUBECONFIG, "current-context": ""}, None, "no context given and no current-context set"),
        (KUBECONFIG, "staging", "contexts has no entry named 'staging'"),
        ({**KUBECONFIG, "users": []}, "dev", "users has no entry named 'dev-user'"),
    ],
)
def test_what_the_kubeconfig_lacks_is_named(kubeconfig: dict[str, Any], context: str | None, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        minimal_kubeconfig(kubeconfig, context)
