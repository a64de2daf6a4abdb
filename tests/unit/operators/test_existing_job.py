"""One base for the sensor and the operators acting on an existing job: the same parameters, the same
checks, the same templating, whichever of them a DAG author uses."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import BaseSensorOperator

from airflow_provider_disttrain.operators.existing_job import ExistingJobOperator
from airflow_provider_disttrain.operators.manage import (
    DeleteTrainingJobOperator,
    ResumeTrainingJobOperator,
    ScaleTrainingJobOperator,
    SuspendTrainingJobOperator,
)
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from tests.unit.fakes import FakeTrainingJobHook, with_hook

EXTRA: dict[type, dict[str, Any]] = {ScaleTrainingJobOperator: {"replicas": 3}}
CLASSES = [
    TrainingJobSensor,
    DeleteTrainingJobOperator,
    ScaleTrainingJobOperator,
    SuspendTrainingJobOperator,
    ResumeTrainingJobOperator,
]


def build(cls: type, **kwargs: Any) -> Any:
    return cls(task_id="t", **EXTRA.get(cls, {}), **kwargs)


@pytest.mark.parametrize("cls", CLASSES)
def test_every_one_is_an_existing_job_operator(cls: type) -> None:
    assert issubclass(cls, ExistingJobOperator)
    assert {"job_name", "namespace", "config_file", "cluster_context"} <= set(cls.template_fields)


def test_the_sensor_is_still_a_sensor() -> None:
    assert issubclass(TrainingJobSensor, BaseSensorOperator)
    sensor = build(TrainingJobSensor, job_name="j", poke_interval=7, mode="reschedule")
    assert (sensor.poke_interval, sensor.mode) == (7, "reschedule")


@pytest.mark.parametrize("cls", CLASSES)
def test_job_name_is_required(cls: type) -> None:
    with pytest.raises(ValueError, match=r"^job_name: is required"):
        build(cls, job_name="")


@pytest.mark.parametrize("cls", CLASSES)
def test_kind_is_read_from_the_kinds_table(cls: type) -> None:
    assert build(cls, job_name="j", kind="mpijob").kind == "MPIJob"
    with pytest.raises(ValueError, match="FooJob"):
        build(cls, job_name="j", kind="FooJob")


@pytest.mark.parametrize("cls", CLASSES)
def test_the_namespace_defaults_to_the_connections(cls: type) -> None:
    operator = with_hook(build(cls, job_name="j"), FakeTrainingJobHook(namespace="ml"))

    assert operator.resolved_namespace() == "ml"
    assert operator.title() == "PyTorchJob ml/j"
    assert with_hook(build(cls, job_name="j", namespace="team-a"), FakeTrainingJobHook()).title() == (
        "PyTorchJob team-a/j"
    )


@pytest.mark.parametrize("cls", CLASSES)
def test_the_connection_parameters_reach_the_hook(cls: type) -> None:
    operator = build(cls, job_name="j", kubernetes_conn_id="k8s", cluster_context="ctx", config_file="/k/config")

    assert (operator.kubernetes_conn_id, operator.cluster_context, operator.config_file) == (
        "k8s",
        "ctx",
        "/k/config",
    )
