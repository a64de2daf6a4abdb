"""The provider's exceptions: one base class, one subclass per way a training task can go wrong."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException


class TrainingJobError(AirflowException):
    """Base class of every error this provider raises."""


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


class JobTimeoutError(TrainingJobError):
    """The job did not start, or did not finish, within the allowed time."""


class JobNotFoundError(TrainingJobError):
    """The job does not exist (never created, or deleted by someone else)."""


class JobAlreadyExistsError(TrainingJobError):
    """A job with the requested name exists and ``if_exists="fail"`` was asked for."""


class ClusterAccessError(TrainingJobError):
    """The API server refused the provider's credentials (401) or permissions (403)."""
