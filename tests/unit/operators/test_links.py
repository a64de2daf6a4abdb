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
