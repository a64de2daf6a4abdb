"""The provider's exceptions: one base class, one subclass per way a training task can go wrong."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowException


class TrainingJobError(AirflowException):
    """Base class of every error this provider raises.

    ``failure``: for a job that failed or timed out, its class as ``failure_class.FailureCause.as_dict()``
    gives it (``{"class": "training" | "infrastructure" | "unknown", "reason", "evidence"}``), JSON-safe.
    """

    failure: dict[str, Any] | None = None


class InvalidJobSpecError(TrainingJobError, ValueError):
    """The job description would be rejected by the cluster or would silently break; nothing was sent.

    ``field`` is the dotted path of the offending field, e.g. ``spec.pytorchReplicaSpecs.Master.replicas``.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class JobFailedError(TrainingJobError):
    """The training job reached the Failed state; the message explains why."""


class JobInadmissibleError(JobFailedError):
    """Kueue can never admit the job as its queues stand: it asks for more than its ClusterQueue can hold,
    no flavor fits it, or its LocalQueue or ClusterQueue is missing, stopped or inactive (``kueue_admission``).
    The job was deleted, or never created when the LocalQueue check before submitting found it so. A retry
    of the same job would be refused the same way until an administrator changes the queues:
    ``DisttrainRetryPolicy`` fails the task at once."""


class JobTimeoutError(TrainingJobError):
    """The job did not start, or did not finish, within the allowed time."""


class JobNotFoundError(TrainingJobError):
    """The job does not exist (never created, or deleted by someone else)."""


class JobAlreadyExistsError(TrainingJobError):
    """A job with the requested name exists and ``if_exists="fail"`` was asked for."""


class ClusterAccessError(TrainingJobError):
    """The API server refused the provider's credentials (401) or permissions (403)."""


class TrainingFailureError(TrainingJobError):
    """The training's own failure (a non-zero exit, a traceback, OOMKilled under its memory limit): a retry
    of the same job would fail the same way. ``DisttrainRetryPolicy`` fails the task at once."""


class InfrastructureFailureError(TrainingJobError):
    """The infrastructure's failure (preemption, eviction, a lost node, an image pull, WaitForPodsReady, a
    deadline): a retry may succeed. ``DisttrainRetryPolicy`` retries it after a delay."""


class LostContactError(InfrastructureFailureError):
    """The wait could not reach the API server for longer than ``wait_policy.api_failure_tolerance``. That
    says nothing about the job: it was not deleted, and a retry of the task reattaches to it."""


class JobFailedInTrainingError(JobFailedError, TrainingFailureError):
    """The job failed, and the training itself is why."""


class JobFailedOnInfrastructureError(JobFailedError, InfrastructureFailureError):
    """The job failed because the infrastructure took its pods away."""


class JobTimeoutInTrainingError(JobTimeoutError, TrainingFailureError):
    """A deadline passed while the training kept failing (e.g. a crash-looping replica)."""


class JobTimeoutOnInfrastructureError(JobTimeoutError, InfrastructureFailureError):
    """A deadline passed while the job waited for the infrastructure (no room to schedule, no image...)."""


# (what happened to the job, its failure class) -> the error raised; an unknown class keeps the plain one.
_CLASSED: dict[tuple[type[TrainingJobError], str], type[TrainingJobError]] = {
    (JobFailedError, "training"): JobFailedInTrainingError,
    (JobFailedError, "infrastructure"): JobFailedOnInfrastructureError,
    (JobTimeoutError, "training"): JobTimeoutInTrainingError,
    (JobTimeoutError, "infrastructure"): JobTimeoutOnInfrastructureError,
}


def classed_error(base: type[TrainingJobError], failure: Mapping[str, Any], message: str) -> TrainingJobError:
    """``base`` (``JobFailedError`` or ``JobTimeoutError``) refined by the failure's class, carrying ``failure``."""
    error = _CLASSED.get((base, str(failure.get("class"))), base)(message)
    error.failure = dict(failure)
    return error
