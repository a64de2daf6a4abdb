"""``MPIJobOperator``: an MPIJob (mpi-operator ``kubeflow.org/v2beta1``) for Horovod and MPI all-reduce."""

from __future__ import annotations

from typing import Any

from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import (
    LAUNCHER_CREATION_POLICIES,
    MPI_IMPLEMENTATIONS,
    MPIOptions,
    refuse_flat_fields,
    require_type,
)

__all__ = ["LAUNCHER_CREATION_POLICIES", "MPI_IMPLEMENTATIONS", "MPIJobOperator"]


class MPIJobOperator(TrainingJobOperator):
    """Run an MPIJob: one Launcher running ``command`` (``mpirun``/``horovodrun``) and ``num_workers``
    Workers serving SSH. The mpi-operator writes the hostfile and SSH keys. All
    ``TrainingJobOperator`` parameters apply (``kind`` is MPIJob, ``command`` is the launcher's; give
    the launcher little with ``replica_resources={"Worker": {...}, "Launcher": {...}}``); in addition:

    :param mpi_options: the MPIJob's own ``spec`` fields (``MPIOptions``: slots per worker, MPI
        implementation, launcher creation policy, launcher as worker).
    """

    fixed_kind = "MPIJob"

    def __init__(self, *, mpi_options: MPIOptions | None = None, **kwargs: Any) -> None:
        refuse_flat_fields(type(self).__name__, "mpi_options", MPIOptions, kwargs)
        super().__init__(**kwargs)
        require_type(mpi_options, MPIOptions, "mpi_options")
        self.mpi_options = mpi_options or MPIOptions()

    def kind_spec_fields(self) -> dict[str, Any]:
        return self.mpi_options.to_spec()
