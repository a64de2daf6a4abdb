"""What ``@task.pytorch_job`` and ``@task.mpi_job`` share: ship the function, run it, return rank 0's value.

The decorated operator is a ``DecoratedOperator`` on top of the kind's operator, as cncf's
``@task.kubernetes`` is on top of ``KubernetesPodOperator``: the function's source (decorators
stripped, dedented) and its XCom-resolved arguments go into the job as JSON in one environment
variable; each replica's command runs ``entrypoint`` (under torchrun or mpirun); rank 0's return
value comes back through the leader pod's termination message and is the task's return value.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow.sdk.bases.decorator import DecoratedOperator
from airflow.sdk.definitions.context import KNOWN_CONTEXT_KEYS

from airflow_provider_disttrain.decorators.payload import PAYLOAD_ENV, PayloadError, encode_payload
from airflow_provider_disttrain.exceptions import TrainingJobError
from airflow_provider_disttrain.job import outcome as outcomes
from airflow_provider_disttrain.manifest.builder import JobParameters
from airflow_provider_disttrain.manifest.pod_validation import env_entries
from airflow_provider_disttrain.pods.termination import leader_termination_message

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.job.kinds import JobKind

# Carries the function's value through ``_finish`` (and the task state store a retry reads) to execute's caller.
RETURN_VALUE_KEY = "return_value"


def _context_keys(kwargs: dict[str, Any]) -> set[str]:
    """The parameter names Airflow fills from the task context for this task (and so leaves unpassed).

    Airflow 3.4 adds ``loop`` to them inside a Task Loop only (elsewhere ``loop`` is an ordinary parameter):
    the same walk up the task groups as its ``@task`` decorator. Airflow keeps ``LoopTaskGroup`` private;
    before 3.4 there is none and the set is ``KNOWN_CONTEXT_KEYS``.
    """
    try:
        from airflow.sdk.definitions._internal.contextmanager import TaskGroupContext
        from airflow.sdk.definitions._internal.loop import LoopTaskGroup  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return set(KNOWN_CONTEXT_KEYS)
    group = kwargs.get("task_group") or TaskGroupContext.get_current(kwargs.get("dag"))
    while group is not None:
        if isinstance(group, LoopTaskGroup):
            return KNOWN_CONTEXT_KEYS | {"loop"}
        group = group.parent_group
    return set(KNOWN_CONTEXT_KEYS)


def decode_return_value(kind: JobKind, title: str, pods: list[dict[str, Any]]) -> Any:
    """Rank 0's value from the leader's termination message; a ``TrainingJobError`` saying why it is missing."""
    found = leader_termination_message(kind, pods)
    if found is None:
        raise TrainingJobError(
            f"{title} succeeded but no leader pod is left to read the function's return value from "
            "(clean_pod_policy 'All' or 'Running' deletes pods when the job finishes: leave it unset)"
        )
    replica, message = found
    if message is None:
        raise TrainingJobError(
            f"{title} succeeded but {replica} left no termination message: was its command the decorator's "
            "entrypoint (an image with this provider installed)?"
        )
    try:
        return json.loads(message)
    except ValueError as error:
        raise TrainingJobError(
            f"{title}: the termination message of {replica} is not JSON ({error}): {message!r}"
        ) from None


class DecoratedTrainingJobOperator(DecoratedOperator):
    """Mixed in before a ``TrainingJobOperator`` subclass; the subclass says how replicas start the function."""

    custom_operator_name: str
    env: Any  # the TrainingJobOperator's

    def __init__(self, *, command: Any = None, wait_for_completion: bool = True, **kwargs: Any) -> None:
        if command is not None:
            raise ValueError(
                f"command: {self.custom_operator_name} runs the decorated function; give launcher arguments in args"
            )
        if not wait_for_completion:
            raise ValueError(
                f"wait_for_completion: {self.custom_operator_name} waits for the job to return the function's value"
            )
        function = kwargs["python_callable"]
        if context_keys := sorted(set(inspect.signature(function).parameters) & _context_keys(kwargs)):
            raise ValueError(
                f"{function.__name__}: parameter {context_keys[0]!r} is an Airflow context key, but the function "
                "runs inside the training job, where the task context is not available: pass what it needs as "
                "arguments"
            )
        super().__init__(**kwargs)

    # -- what the replicas run -------------------------------------------------------------------------

    def launcher_command(self) -> tuple[list[str], list[str] | None]:
        """``(command, args)`` of the replicas that start the function; ``self.args`` are the launcher's."""
        raise NotImplementedError

    def payload(self) -> str:
        """The function's source and rendered arguments as JSON (``PayloadError`` naming a bad argument)."""
        name = self.python_callable.__name__
        try:
            source = self.get_python_source()
        except OSError as error:  # inspect.getsource: a function typed into a REPL or built at run time
            raise PayloadError(f"{name}: its source cannot be read to ship it into the job ({error})") from None
        return encode_payload(name, source, list(self.op_args), self.op_kwargs)

    def job_parameters(self) -> JobParameters:
        command, args = self.launcher_command()
        env = [*env_entries(self.env or []), {"name": PAYLOAD_ENV, "value": self.payload()}]
        return replace(super().job_parameters(), command=command, args=args, env=env)  # type: ignore[misc]

    # -- the return value ------------------------------------------------------------------------------

    def _finish(
        self, hook: TrainingJobHook, outcome: outcomes.Outcome, context: Context, *, logs_forwarded: bool
    ) -> dict[str, Any]:
        ref = self._job_ref  # type: ignore[attr-defined]
        if outcome.status == outcomes.SUCCESS and ref is not None:
            # Read before the base class may delete the job (delete_on_finish) and saves the result for a retry.
            kind = self.job_kind  # type: ignore[attr-defined]
            value = decode_return_value(kind, ref.title, hook.list_job_pods(ref.name, ref.namespace, kind=kind))
            outcome = replace(outcome, job={**(outcome.job or {}), RETURN_VALUE_KEY: value})
        return super()._finish(hook, outcome, context, logs_forwarded=logs_forwarded)  # type: ignore[misc]

    @staticmethod
    def _return_value(result: Any) -> Any:
        # A dry run returns the admitted job's summary: nothing ran, so there is no value to return.
        return result[RETURN_VALUE_KEY] if isinstance(result, dict) and RETURN_VALUE_KEY in result else result

    def execute(self, context: Context) -> Any:
        return self._return_value(super().execute(context))

    def execute_complete(
        self, context: Context, event: dict[str, Any], job_uid: str | None = None, reattached: bool = False
    ) -> Any:
        result = super().execute_complete(context, event, job_uid=job_uid, reattached=reattached)  # type: ignore[misc]
        return self._return_value(result)
