"""``MPIJobOperator``: an MPIJob (mpi-operator ``kubeflow.org/v2beta1``) for Horovod and MPI all-reduce."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_disttrain.kinds import get_job_kind
from airflow_provider_disttrain.manifest.pod_validation import validate_resources
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator

# The kinds table's allowed values, checked here under the parameters' names when the DAG is parsed.
_SPEC_CHOICES = dict(get_job_kind("MPIJob").spec_choices)
MPI_IMPLEMENTATIONS = tuple(sorted(_SPEC_CHOICES["mpiImplementation"]))
LAUNCHER_CREATION_POLICIES = tuple(sorted(_SPEC_CHOICES["launcherCreationPolicy"]))


class MPIJobOperator(TrainingJobOperator):
    """Run an MPIJob: one Launcher running ``command`` (``mpirun``/``horovodrun``) and ``num_workers``
    Workers serving SSH. The mpi-operator writes the hostfile and SSH keys. All
    ``TrainingJobOperator`` parameters apply (``command`` is the launcher's); in addition:

    :param slots_per_worker: MPI slots per worker (usually GPUs per worker).
    :param mpi_implementation: ``OpenMPI``, ``Intel`` or ``MPICH``.
    :param launcher_creation_policy: ``AtStartup`` or ``WaitForWorkersReady``.
    :param worker_resources: resources of the Worker replicas (the launcher usually needs little).
    :param launcher_resources: resources of the Launcher.
    :param run_launcher_as_worker: also run an MPI rank in the launcher pod.
    """

    default_kind = "MPIJob"

    def __init__(
        self,
        *,
        slots_per_worker: int | None = None,
        mpi_implementation: str | None = None,
        launcher_creation_policy: str | None = None,
        worker_resources: Mapping[str, Any] | None = None,
        launcher_resources: Mapping[str, Any] | None = None,
        run_launcher_as_worker: bool | None = None,
        spec_fields: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("kind", None)
        if slots_per_worker is not None and (
            isinstance(slots_per_worker, bool) or not isinstance(slots_per_worker, int) or slots_per_worker < 1
        ):
            raise ValueError(f"slots_per_worker: expected an integer >= 1, got {slots_per_worker!r}")
        if mpi_implementation is not None and mpi_implementation not in MPI_IMPLEMENTATIONS:
            raise ValueError(
                f"mpi_implementation: {mpi_implementation!r} is not one of {', '.join(MPI_IMPLEMENTATIONS)}"
            )
        if launcher_creation_policy is not None and launcher_creation_policy not in LAUNCHER_CREATION_POLICIES:
            raise ValueError(
                f"launcher_creation_policy: {launcher_creation_policy!r} is not one of "
                f"{', '.join(LAUNCHER_CREATION_POLICIES)}"
            )
        if (worker_resources or launcher_resources) and kwargs.get("resources"):
            raise ValueError("resources: give either resources or worker_resources/launcher_resources, not both")
        # Checked under their own names: once packed below, an error would name "resources.Worker".
        for field, requirements in (("worker_resources", worker_resources), ("launcher_resources", launcher_resources)):
            if requirements:
                validate_resources(requirements, field)
        if worker_resources or launcher_resources:
            kwargs["resources"] = {
                replica: dict(resources)
                for replica, resources in (("Worker", worker_resources), ("Launcher", launcher_resources))
                if resources
            }
        fields: dict[str, Any] = dict(spec_fields or {})
        for key, value in (
            ("slotsPerWorker", slots_per_worker),
            ("mpiImplementation", mpi_implementation),
            ("launcherCreationPolicy", launcher_creation_policy),
            ("runLauncherAsWorker", run_launcher_as_worker),
        ):
            if value is not None:
                fields[key] = value
        super().__init__(kind="MPIJob", spec_fields=fields or None, **kwargs)
        self.slots_per_worker = slots_per_worker
        self.mpi_implementation = mpi_implementation
        self.launcher_creation_policy = launcher_creation_policy
