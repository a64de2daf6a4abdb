"""``@task.pytorch_job``: run the decorated function on every process of a PyTorchJob, under torchrun."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk.bases.decorator import TaskDecorator, task_decorator_factory

from airflow_provider_disttrain.decorators.base import DecoratedTrainingJobOperator
from airflow_provider_disttrain.decorators.payload import ENTRYPOINT_MODULE
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator


class PyTorchJobDecoratedOperator(DecoratedTrainingJobOperator, PyTorchJobOperator):
    """Each replica runs ``torchrun [args] --module <entrypoint>``. torchrun reads what the training-operator
    injects (PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE from ``pytorch_options.nproc_per_node``,
    PET_MASTER_ADDR/PORT, or the PET_RDZV_* of an elastic job) and starts that many processes per pod, each with its
    global RANK; the process with RANK 0 (on master-0) writes the return value."""

    custom_operator_name = "@task.pytorch_job"
    template_fields: Sequence[str] = tuple({"op_args", "op_kwargs", *PyTorchJobOperator.template_fields} - {"command"})
    shallow_copy_attrs: Sequence[str] = ("python_callable",)

    def launcher_command(self) -> tuple[list[str], list[str] | None]:
        return ["torchrun"], [*(self.args or []), "--module", ENTRYPOINT_MODULE]


def pytorch_job_task(
    python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """Run the function on every process of a PyTorchJob; rank 0's return value is the task's XCom.

    Accepts every ``PyTorchJobOperator`` parameter (``image``, ``num_workers``, ``gpus_per_replica``,
    ``pytorch_options=PyTorchOptions(nproc_per_node=...)``, ``deferrable``, ...) except ``command``; ``args``
    are extra torchrun arguments. The image needs torch and this provider (``pip install --no-deps
    airflow-provider-disttrain``; Airflow is not needed there). Arguments and the return value travel as JSON.
    """
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=PyTorchJobDecoratedOperator,
        **kwargs,
    )
