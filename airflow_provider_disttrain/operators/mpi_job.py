"""``MPIJobOperator``: an MPIJob (mpi-operator ``kubeflow.org/v2beta1``) for Horovod and MPI all-reduce."""

from __future__ import annotations

from typing import Any

from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import integer_at_least, optional_choice

# The kinds table's allowed values, checked here under the parameters' names when the DAG is parsed.
_SPEC_CHOICES = dict(get_job_kind("MPIJob").spec_choices)
MPI_IMPLEMENTATIONS = tuple(sorted(_SPEC_CHOICES["mpiImplementation"]))
LAUNCHER_CREATION_POLICIES = tuple(sorted(_SPEC_CHOICES["launcherCreationPolicy"]))


class MPIJobOperator(TrainingJobOperator):
    """Run an MPIJob: one Launcher running ``command`` (``mpirun``/``horovodrun``) and ``num_workers``
    Workers serving SSH. The mpi-operator writes the hostfile and SSH keys. All
    ``TrainingJobOperator`` parameters apply (``kind`` is MPIJob, ``command`` is the launcher's; give
    the launcher little with ``replica_resources={"Worker": {...}, "Launcher": {...}}``); in addition:

    :param slots_per_worker: MPI slots per worker (usually GPUs per worker).
    :param mpi_implementation: ``OpenMPI``, ``Intel`` or ``MPICH``.
    :param launcher_creation_policy: ``AtStartup`` or ``WaitForWorkersReady``.
    :param run_launcher_as_worker: also run an MPI rank in the launcher pod.
    """

    fixed_kind = "MPIJob"

    def __init__(
        self,
        *,
        slots_per_worker: int | None = None,
        mpi_implementation: str | None = None,
        launcher_creation_policy: str | None = None,
        run_launcher_as_worker: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.slots_per_worker = integer_at_least(slots_per_worker, "slots_per_worker")
        self.mpi_implementation = optional_choice(mpi_implementation, MPI_IMPLEMENTATIONS, "mpi_implementation")
        self.launcher_creation_policy = optional_choice(
            launcher_creation_policy, LAUNCHER_CREATION_POLICIES, "launcher_creation_policy"
        )
        self.run_launcher_as_worker = run_launcher_as_worker

    def kind_spec_fields(self) -> dict[str, Any]:
        fields = {
            "slotsPerWorker": self.slots_per_worker,
            "mpiImplementation": self.mpi_implementation,
            "launcherCreationPolicy": self.launcher_creation_policy,
            "runLauncherAsWorker": self.run_launcher_as_worker,
        }
        return {key: value for key, value in fields.items() if value is not None}
