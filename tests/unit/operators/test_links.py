"""The 'Training job' extra link, rendered from ``[disttrain] job_url_template``."""

from __future__ import annotations

import pytest

from airflow_provider_disttrain.operators.links import TrainingJobLink, render_job_url

TEMPLATE = "https://kubeflow.example.com/#/jobs/{namespace}/{name}?kind={kind}"


def test_the_template_is_filled_with_namespace_name_and_kind():
    assert render_job_url(TEMPLATE, name="pytorch-simple-x7k2p9", namespace="kubeflow", kind="PyTorchJob") == (
        "https://kubeflow.example.com/#/jobs/kubeflow/pytorch-simple-x7k2p9?kind=PyTorchJob"
    )


def test_placeholders_may_repeat_or_be_left_out():
    template = "https://grafana.example.com/d/training?var-job={name}&var-pod={name}-master-0"
    assert render_job_url(template, name="mnist", namespace="team-a", kind="PyTorchJob") == (
        "https://grafana.example.com/d/training?var-job=mnist&var-pod=mnist-master-0"
    )


def test_a_missing_namespace_renders_empty():
    assert render_job_url("{namespace}/{name}", name="pi", namespace=None, kind="MPIJob") == "/pi"


@pytest.mark.parametrize("template", [None, ""])
def test_no_template_means_no_link(template):
    assert render_job_url(template, name="mnist", namespace="kubeflow", kind="PyTorchJob") == ""


@pytest.mark.parametrize("name", [None, ""])
def test_no_job_yet_means_no_link(name):
    assert render_job_url(TEMPLATE, name=name, namespace="kubeflow", kind="PyTorchJob") == ""


def test_the_link_is_named_for_the_ui():
    assert TrainingJobLink().name == "Training job"


def test_a_serialized_dag_stores_the_link_by_name_not_by_class_path():
    """Airflow stores an operator's extra links as ``{name: xcom_key}`` and rebuilds them from that alone:
    no class path of the link is kept, so a DAG serialized before ``links.py`` moved into ``operators/``
    deserializes the same."""
    import json

    from airflow.sdk import DAG
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_provider_disttrain import PyTorchJobOperator

    with DAG(dag_id="linked", schedule=None) as dag:
        PyTorchJobOperator(task_id="train", image="trainer:1")
    serialized = DagSerialization.to_dict(dag)
    (task,) = serialized["dag"]["tasks"]
    # The XCom key is made of the class's name alone (``_link_TrainingJobLink``), which the move kept.
    assert task["__var"]["_operator_extra_links"] == {"Training job": "_link_TrainingJobLink"}
    text = json.dumps(serialized)
    assert TrainingJobLink.__module__ not in text
    assert "airflow_provider_disttrain.links" not in text

    restored = DagSerialization.from_dict(serialized)
    assert [link.name for link in restored.get_task("train").operator_extra_links] == ["Training job"]
