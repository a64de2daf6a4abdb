"""``kueue.dispatch``: which worker cluster MultiKueue runs a job on, and which connection reaches it."""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.kueue.dispatch import (
    WorkerClusters,
    dispatched_to,
    extra_worker_clusters,
    validate_worker_clusters,
)


def test_the_cluster_is_the_workloads_cluster_name() -> None:
    assert dispatched_to({"status": {"clusterName": "worker-1"}}) == "worker-1"
    assert dispatched_to({"status": {}}) is None
    assert dispatched_to(None) is None


def test_a_cluster_is_mapped_by_its_exact_name_only() -> None:
    clusters = WorkerClusters({"worker-1": "k8s_w1"}, {}, "k8s_manager")

    assert clusters.resolve("worker-1").conn_id == "k8s_w1"
    for near in ("Worker-1", "worker-10", "worker"):
        dispatch = clusters.resolve(near)
        assert not dispatch.mapped and dispatch.cluster == near


def test_the_parameter_wins_and_the_extra_maps_the_rest() -> None:
    clusters = WorkerClusters({"worker-1": "param"}, {"worker-1": "extra", "worker-2": "extra2"}, "k8s_manager")

    assert clusters.resolve("worker-1").conn_id == "param"
    second = clusters.resolve("worker-2")
    assert second.conn_id == "extra2" and "connection 'k8s_manager'" in str(second.source)


def test_the_mapping_travels_to_the_trigger_and_back() -> None:
    clusters = WorkerClusters({"worker-1": "a"}, {"worker-2": "b"}, "m")

    assert WorkerClusters.from_dict(clusters.to_dict()) == clusters
    assert not WorkerClusters.from_dict(None).maps_any  # a row stored before the mapping existed


def test_the_extra_may_be_json_text_and_bad_text_names_the_connection() -> None:
    assert extra_worker_clusters('{"worker-1": "k8s_w1"}', "k8s") == {"worker-1": "k8s_w1"}
    assert extra_worker_clusters("", "k8s") == {}
    with pytest.raises(InvalidJobSpecError) as refused:
        extra_worker_clusters("[1, 2", "k8s")
    assert refused.value.field == "connection 'k8s' extra worker_clusters"


def test_a_connection_id_is_stripped_and_must_not_be_blank() -> None:
    assert validate_worker_clusters({"worker-1": " k8s "}) == {"worker-1": "k8s"}
    with pytest.raises(InvalidJobSpecError):
        validate_worker_clusters({"worker-1": "  "})
