"""``@task.mpi_job``: run the decorated function on every slot of an MPIJob, under mpirun from the launcher."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk.bases.decorator import TaskDecorator, task_decorator_factory

from airflow_provider_disttrain.decorators.base import DecoratedTrainingJobOperator
from airflow_provider_disttrain.decorators.payload import ENTRYPOINT_MODULE
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator


class MPIJobDecoratedOperator(DecoratedTrainingJobOperator, MPIJobOperator):
    """The launcher runs the entrypoint with ``--mpirun``: it starts the function on every slot of the
    hostfile the mpi-operator wrote (forwarding the payload variable), and writes what rank 0 printed
    back as its own termination message. ``args`` are extra mpirun arguments."""

    custom_operator_name = "@task.mpi_job"
    template_fields: Sequence[str] = tuple({"op_args", "op_kwargs", *MPIJobOperator.template_fields} - {"command"})
    shallow_copy_attrs: Sequence[str] = ("python_callable",)

    def launcher_command(self) -> tuple[list[str], list[str] | None]:
        implementation = self.mpi_options.mpi_implementation or "OpenMPI"  # the mpi-operator's default
        command = ["python", "-m", ENTRYPOINT_MODULE, "--mpirun", "--mpi-implementation", implementation, "--"]
        return command, list(self.args) if self.args else None


def mpi_job_task(
    python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """Run the function on every MPI slot of an MPIJob; rank 0's return value is the task's XCom.

    Accepts every ``MPIJobOperator`` parameter (``image``, ``num_workers``,
    ``mpi_options=MPIOptions(slots_per_worker=..., mpi_implementation=...)``, ``deferrable``, ...) except
    ``command``; ``args`` are extra mpirun arguments (e.g. ``["--allow-run-as-root"]``). The image needs an MPI
    and this provider (``pip install --no-deps airflow-provider-disttrain``). Arguments and the return value
    travel as JSON.
    """
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=MPIJobDecoratedOperator,
        **kwargs,
    )
