"""Apache Airflow provider for Kubeflow distributed training jobs (PyTorchJob, MPIJob, TrainJob, ...).

The operators, the sensor, the operators' grouped parameter types and the retry policy are re-exported
lazily: ``from airflow_provider_disttrain import PyTorchJobOperator`` imports only that operator's
module, keeping DAG parsing fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.version import __version__

_LAZY_EXPORTS = {
    "TrainingJobOperator": "airflow_provider_disttrain.operators.training_job",
    "PyTorchJobOperator": "airflow_provider_disttrain.operators.pytorch_job",
    "MPIJobOperator": "airflow_provider_disttrain.operators.mpi_job",
    "TrainJobOperator": "airflow_provider_disttrain.operators.train_job",
    "DeleteTrainingJobOperator": "airflow_provider_disttrain.operators.manage",
    "ScaleTrainingJobOperator": "airflow_provider_disttrain.operators.manage",
    "SuspendTrainingJobOperator": "airflow_provider_disttrain.operators.manage",
    "ResumeTrainingJobOperator": "airflow_provider_disttrain.operators.manage",
    "TrainingJobSensor": "airflow_provider_disttrain.sensors.training_job",
    "DeleteOrphanedTrainingJobsOperator": "airflow_provider_disttrain.operators.orphans",
    "RunPolicy": "airflow_provider_disttrain.parameters",
    "PodOptions": "airflow_provider_disttrain.parameters",
    "WaitPolicy": "airflow_provider_disttrain.parameters",
    "CleanupPolicy": "airflow_provider_disttrain.parameters",
    "PyTorchOptions": "airflow_provider_disttrain.parameters",
    "MPIOptions": "airflow_provider_disttrain.parameters",
    # Built on first use, and only on Airflow 3.3+ (an ImportError that says so on 3.2).
    "DisttrainRetryPolicy": "airflow_provider_disttrain.failures.retry_policy",
}

# DisttrainRetryPolicy is importable by name but not in __all__: on Airflow 3.2 it raises an ImportError
# saying it needs 3.3, and ``from airflow_provider_disttrain import *`` must work on every supported Airflow.
__all__ = [
    "CleanupPolicy",
    "DeleteOrphanedTrainingJobsOperator",
    "DeleteTrainingJobOperator",
    "MPIJobOperator",
    "MPIOptions",
    "PodOptions",
    "PyTorchJobOperator",
    "PyTorchOptions",
    "ResumeTrainingJobOperator",
    "RunPolicy",
    "ScaleTrainingJobOperator",
    "SuspendTrainingJobOperator",
    "TrainJobOperator",
    "TrainingJobOperator",
    "TrainingJobSensor",
    "WaitPolicy",
    "__version__",
]

if TYPE_CHECKING:
    from airflow_provider_disttrain.failures.retry_policy import DisttrainRetryPolicy as DisttrainRetryPolicy
    from airflow_provider_disttrain.operators.manage import (
        DeleteTrainingJobOperator,
        ResumeTrainingJobOperator,
        ScaleTrainingJobOperator,
        SuspendTrainingJobOperator,
    )
    from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
    from airflow_provider_disttrain.operators.orphans import DeleteOrphanedTrainingJobsOperator
    from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
    from airflow_provider_disttrain.operators.train_job import TrainJobOperator
    from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
    from airflow_provider_disttrain.parameters import (
        CleanupPolicy,
        MPIOptions,
        PodOptions,
        PyTorchOptions,
        RunPolicy,
        WaitPolicy,
    )
    from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor


def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
