"""Every operator, sensor and decorator of the provider takes Airflow's parameters as Airflow means them.

The set of ``BaseOperator`` parameters is read from its signature (so a new Airflow parameter is
covered too), and every class of the provider that is an operator is found by walking its modules.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest
from airflow.sdk import BaseOperator

import airflow_provider_disttrain
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.operators.train_job import TrainJobOperator

BASE_OPERATOR_PARAMETERS = frozenset(inspect.signature(BaseOperator.__init__).parameters) - {"self", "kwargs"}
PACKAGE = airflow_provider_disttrain.__name__


def provider_operator_classes() -> list[type]:
    classes: dict[str, type] = {}
    for module_info in pkgutil.walk_packages(airflow_provider_disttrain.__path__, f"{PACKAGE}."):
        if module_info.name.endswith(".entrypoint"):
            continue  # runs inside the training pods
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseOperator) and value.__module__.startswith(PACKAGE):
                classes[f"{value.__module__}.{value.__qualname__}"] = value
    return [classes[name] for name in sorted(classes)]


def own_parameters(cls: type) -> set[str]:
    """The named parameters the provider's classes in ``cls``'s MRO add (not Airflow's own classes')."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith(PACKAGE) and "__init__" in vars(klass):
            parameters = inspect.signature(klass.__init__).parameters.values()
            names |= {p.name for p in parameters if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD}
    return names - {"self"}


OPERATORS = provider_operator_classes()


def test_the_walk_finds_every_kind_of_operator_the_provider_has() -> None:
    names = {cls.__name__ for cls in OPERATORS}
    assert {"PyTorchJobOperator", "MPIJobOperator", "TrainJobOperator", "TrainingJobOperator"} <= names
    assert {"TrainingJobSensor", "DeleteTrainingJobOperator", "ScaleTrainingJobOperator"} <= names
    assert {"PyTorchJobDecoratedOperator", "MPIJobDecoratedOperator"} <= names
    assert {"queue", "resources", "pool", "priority_weight", "inlets", "outlets"} <= BASE_OPERATOR_PARAMETERS


@pytest.mark.parametrize("cls", OPERATORS, ids=lambda cls: cls.__name__)
def test_no_parameter_of_the_provider_shadows_a_base_operator_parameter(cls: type) -> None:
    assert own_parameters(cls) & BASE_OPERATOR_PARAMETERS == set()


def test_queue_is_airflows_executor_queue_and_local_queue_is_kueues() -> None:
    task = PyTorchJobOperator(task_id="t", image="i", queue="gpu-workers", local_queue="user-queue")
    assert (task.queue, task.local_queue) == ("gpu-workers", "user-queue")


# The parameters each operator needs to be made at all; everything else has a default.
REQUIRED: dict[str, dict[str, Any]] = {
    "ExistingJobOperator": {"job_name": "j"},
    "_ManageJobOperator": {"job_name": "j"},
    "ScaleTrainingJobOperator": {"job_name": "j", "replicas": 2},
    "DeleteTrainingJobOperator": {"job_name": "j"},
    "SuspendTrainingJobOperator": {"job_name": "j"},
    "ResumeTrainingJobOperator": {"job_name": "j"},
    "TrainingJobSensor": {"job_name": "j"},
}


@pytest.mark.parametrize(
    "cls",
    # The decorated operators need a function: tests/unit/decorators checks them through the decorator.
    [cls for cls in OPERATORS if "Decorated" not in cls.__name__],
    ids=lambda cls: cls.__name__,
)
def test_every_parameter_is_an_attribute_of_the_same_name(cls: type) -> None:
    """Templating, ``partial()``/``expand()`` and DAG serialization find a parameter by its name."""
    task = cls(task_id="t", **REQUIRED.get(cls.__name__, {}))
    missing = {name for name in own_parameters(cls) if not hasattr(task, name)}
    assert missing == set()
    assert set(cls.template_fields) <= own_parameters(cls)


@pytest.mark.parametrize(
    ("cls", "other"),
    [(PyTorchJobOperator, "MPIJob"), (MPIJobOperator, "TFJob"), (TrainJobOperator, "PyTorchJob")],
    ids=lambda value: value if isinstance(value, str) else value.__name__,
)
def test_a_conflicting_kind_raises_instead_of_being_dropped(cls: type, other: str) -> None:
    with pytest.raises(ValueError, match=rf"^kind: {cls.__name__} runs \w+s, not {other}s"):
        cls(task_id="t", image="i", kind=other)


@pytest.mark.parametrize("cls", OPERATORS, ids=lambda cls: cls.__name__)
def test_every_operator_takes_at_most_30_parameters_of_its_own(cls: type) -> None:
    """45 to 53 before the first grouping, 32 before issue 27 (CHANGELOG.md); the common case stays flat."""
    assert len(own_parameters(cls)) <= 30, (cls.__name__, sorted(own_parameters(cls)))


def test_the_common_case_stays_flat() -> None:
    assert {"image", "command", "num_workers", "gpus_per_replica"} <= own_parameters(PyTorchJobOperator)
