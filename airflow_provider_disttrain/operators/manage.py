"""Operators that act on an existing training job: delete, scale, suspend and resume it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.exceptions import JobNotFoundError
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.manifest.patches import current_workers, scale_patch, suspend_patch
from airflow_provider_disttrain.operators.existing_job import ExistingJobOperator
from airflow_provider_disttrain.utils.clock import SYSTEM, Clock

if TYPE_CHECKING:
    from airflow.sdk import Context


class _ManageJobOperator(ExistingJobOperator):
    ui_color = "#f1f3f4"


class DeleteTrainingJobOperator(_ManageJobOperator):
    """Delete a job and (through owner references) its pods.

    :param wait_for_deletion: wait until the API server no longer has the job.
    :param ignore_not_found: succeed when the job is already gone (default True).
    :param deletion_timeout: seconds to wait for the deletion.
    """

    def __init__(
        self,
        *,
        wait_for_deletion: bool = True,
        ignore_not_found: bool = True,
        deletion_timeout: float = 300.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.clock: Clock = SYSTEM  # what the wait for the deletion reads and sleeps on (a test's)
        self.wait_for_deletion = wait_for_deletion
        self.ignore_not_found = ignore_not_found
        self.deletion_timeout = deletion_timeout

    def execute(self, context: Context) -> bool:
        namespace = self.resolved_namespace()
        if self.wait_for_deletion:
            deleted = self.hook.delete_and_wait(
                self.kind, self.job_name, namespace, timeout=self.deletion_timeout, clock=self.clock
            )
        else:
            deleted = self.hook.delete_job(self.kind, self.job_name, namespace)
        if not deleted:
            if not self.ignore_not_found:
                raise JobNotFoundError(f"{self.title()} does not exist")
            self.log.info("%s was already gone", self.title())
            return False
        self.log.info("Deleted %s", self.title())
        return True


class ScaleTrainingJobOperator(_ManageJobOperator):
    """Set the Worker replica count of a job: an elastic PyTorchJob within [min, max], or an MPIJob.

    Any other job is refused while it runs (its pods keep the world size they started with); suspend
    it first, and its pods are recreated at the new size when it is resumed.

    :param replicas: the new number of Worker replicas.
    """

    template_fields: Sequence[str] = (*ExistingJobOperator.template_fields, "replicas")

    def __init__(self, *, replicas: int | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.replicas = replicas

    def execute(self, context: Context) -> dict[str, Any]:
        kind = get_job_kind(self.kind)
        job = self.get_existing_job()
        replicas = int(self.replicas) if isinstance(self.replicas, str) else self.replicas
        patch = scale_patch(kind, job, replicas)
        previous = current_workers(kind, job)
        self.hook.patch_job(self.kind, self.job_name, self.resolved_namespace(), patch)
        self.log.info("Scaled %s workers from %s to %s", self.title(), previous, replicas)
        return {
            "name": self.job_name,
            "namespace": self.resolved_namespace(),
            "kind": self.kind,
            "previous_replicas": previous,
            "replicas": replicas,
        }


class SuspendTrainingJobOperator(_ManageJobOperator):
    """Suspend a job (``spec.runPolicy.suspend: true``; a TrainJob's ``spec.suspend``): the operator deletes
    its pods, freeing the GPUs."""

    suspend = True

    def execute(self, context: Context) -> dict[str, Any]:
        self.get_existing_job()
        patch = suspend_patch(get_job_kind(self.kind), self.suspend)
        job = self.hook.patch_job(self.kind, self.job_name, self.resolved_namespace(), patch)
        self.log.info("%s %s", "Suspended" if self.suspend else "Resumed", self.title())
        return JobView.of(job).result(self.kind)


class ResumeTrainingJobOperator(SuspendTrainingJobOperator):
    """Resume a suspended job (``suspend: false``, where the kind keeps it); the operator recreates its pods."""

    suspend = False
