"""A retry policy for training tasks: retry what the infrastructure broke, never what the training broke.

Airflow 3.3 evaluates a task's ``retry_policy`` in the worker with the exception the task failed with.
The provider's errors say whose failure it was (``exceptions.TrainingFailureError`` or
``InfrastructureFailureError``, from ``failure_class.classify``), so::

    from airflow_provider_disttrain.failures.retry_policy import DisttrainRetryPolicy

    PyTorchJobOperator(..., retries=3, retry_policy=DisttrainRetryPolicy(infrastructure_delay=timedelta(minutes=10)))

fails the task at once on a traceback, a non-zero exit or an OOMKill (eight GPUs are not spent again
on a bug) and on a job Kueue can never admit (``JobInadmissibleError``), retries an eviction, a
preemption, a lost node, an image pull or a deadline after ``infrastructure_delay`` (still within
``retries``: a policy cannot add tries), and leaves every other error (an unknown class, an API error)
to the task's own ``retries`` and ``retry_delay``.

On Airflow 3.4 and later, whose policies may answer ``RESCHEDULE`` ("run the task again later without
using a retry"), the platform taking the pods away (a Kueue or scheduler preemption, an eviction, a
drained or lost node: ``DISRUPTIONS``) reschedules the task instead, at
most ``max_reschedules`` times per try (then Airflow's own retry logic applies, with the reason): a
preempted training does not use up the retries meant for real failures. The other infrastructure
failures (an image pull, a deadline) are retried as on 3.3. The task log says which happened.

Airflow 3.2 has no ``retry_policy``: importing ``DisttrainRetryPolicy`` there raises an ImportError
that says so, and ``decide`` (the same judgement, as plain values) can be used from an
``on_retry_callback`` or a custom operator. The errors carry their class on 3.2 too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.exceptions import (
    InfrastructureFailureError,
    JobInadmissibleError,
    TrainingFailureError,
)

if TYPE_CHECKING:
    from airflow.sdk.definitions.retry_policy import RetryDecision

__all__ = ["Verdict", "decide"]  # and DisttrainRetryPolicy, built on first use (``__getattr__``)

DEFAULT_INFRASTRUCTURE_DELAY = timedelta(minutes=5)
DEFAULT_MAX_RESCHEDULES = 3
# The failure reasons (``failure_class.REASONS``) with which the platform took the pods away for others or
# lost their node: nothing was wrong with the job, so on Airflow 3.4 the task is rescheduled rather than
# charged a retry. An image that cannot be pulled or Kueue's WaitForPodsReady timeout may fail again the
# same way: those stay retries, bounded by ``retries``.
DISRUPTIONS = frozenset(
    {
        "Preempted",  # Kueue
        "PreemptionByScheduler",
        "PreemptionByKubeScheduler",
        "Evicted",
        "EvictionByEvictionAPI",  # a node drain
        "TerminationByKubelet",  # node-pressure eviction
        "NodeLost",
        "NodeNotReady",
        "Shutdown",  # graceful node shutdown
        "Terminated",
        "DeletionByTaintManager",
        "TaintManagerEviction",
        "DeletionByPodGC",
        "ContainerStatusUnknown",
    }
)
NEEDS = (
    "DisttrainRetryPolicy needs Airflow 3.3 or later, whose operators take retry_policy= "
    "(airflow.sdk.definitions.retry_policy); this is Airflow {version}. On it every failure is retried as the "
    "task's retries and retry_delay say; the error's class is still in its type (TrainingFailureError, "
    "InfrastructureFailureError) and its `failure` attribute."
)


@dataclass(frozen=True)
class Verdict:
    """What to do after a failure: ``action`` is ``"retry"``, ``"fail"``, ``"reschedule"`` (Airflow 3.4+, only
    when asked for) or ``"default"`` (the task's own rule)."""

    action: str
    delay: timedelta | None = None
    reason: str | None = None


def _reason(exception: BaseException) -> str:
    failure = getattr(exception, "failure", None) or {}
    return str(failure.get("reason") or type(exception).__name__)


def decide(
    exception: BaseException,
    infrastructure_delay: timedelta | None = DEFAULT_INFRASTRUCTURE_DELAY,
    *,
    reschedule: bool = False,
) -> Verdict:
    """The policy's judgement of ``exception``, as plain values (usable on any Airflow version).

    ``reschedule``: answer ``"reschedule"`` for a disruption (``DISRUPTIONS``) rather than ``"retry"``; only
    where Airflow can reschedule without using a retry (3.4+).
    """
    if isinstance(exception, JobInadmissibleError):
        return Verdict("fail", reason="Kueue can never admit the job as its queues stand: not retried")
    if isinstance(exception, TrainingFailureError):
        return Verdict("fail", reason=f"the training's own failure ({_reason(exception)}): not retried")
    if isinstance(exception, InfrastructureFailureError) and reschedule and _reason(exception) in DISRUPTIONS:
        return Verdict(
            "reschedule",
            infrastructure_delay,
            f"the platform took the pods away ({_reason(exception)}): rescheduled without using a retry",
        )
    if isinstance(exception, InfrastructureFailureError):
        return Verdict("retry", infrastructure_delay, f"the infrastructure's failure ({_reason(exception)}): retried")
    return Verdict("default")


def _policy_class() -> type:
    try:
        from airflow.sdk.definitions.retry_policy import RetryAction, RetryDecision, RetryPolicy
    except ImportError as missing:
        from airflow import __version__

        raise ImportError(NEEDS.format(version=__version__)) from missing

    # Airflow 3.4 added RESCHEDULE (and RetryDecision's bounds for it); 3.3 has neither.
    can_reschedule = hasattr(RetryAction, "RESCHEDULE")

    class DisttrainRetryPolicy(RetryPolicy):
        """Fail the task at once on the training's own failure; retry the infrastructure's after a delay
        (on Airflow 3.4+, reschedule a preemption or a lost node instead, ``max_reschedules`` times a try;
        0 retries those too)."""

        def __init__(
            self,
            infrastructure_delay: timedelta | None = DEFAULT_INFRASTRUCTURE_DELAY,
            max_reschedules: int = DEFAULT_MAX_RESCHEDULES,
        ) -> None:
            if isinstance(max_reschedules, bool) or not isinstance(max_reschedules, int) or max_reschedules < 0:
                raise ValueError(f"max_reschedules: expected a whole number >= 0, got {max_reschedules!r}")
            self.infrastructure_delay = infrastructure_delay
            self.max_reschedules = max_reschedules

        def evaluate(
            self, exception: BaseException, try_number: int, max_tries: int, context: Any = None
        ) -> RetryDecision:
            reschedule = can_reschedule and self.max_reschedules > 0
            verdict = decide(exception, self.infrastructure_delay, reschedule=reschedule)
            bounds = {"max_reschedules": self.max_reschedules} if verdict.action == "reschedule" else {}
            return RetryDecision(
                action=RetryAction(verdict.action), retry_delay=verdict.delay, reason=verdict.reason, **bounds
            )

        def serialize(self) -> dict[str, Any]:
            delay = self.infrastructure_delay
            seconds = None if delay is None else delay.total_seconds()
            return {
                "__type": type(self).__name__,
                "infrastructure_delay": seconds,
                "max_reschedules": self.max_reschedules,
            }

        @classmethod
        def deserialize(cls, data: dict[str, Any]) -> DisttrainRetryPolicy:
            seconds = data.get("infrastructure_delay")
            # A DAG serialized before max_reschedules existed takes its default.
            return cls(
                None if seconds is None else timedelta(seconds=seconds),
                data.get("max_reschedules", DEFAULT_MAX_RESCHEDULES),
            )

    DisttrainRetryPolicy.__module__ = __name__
    return DisttrainRetryPolicy


def __getattr__(name: str) -> Any:
    # Built on first use: the module imports on Airflow 3.2 (for ``decide``), the class only on 3.3+.
    if name == "DisttrainRetryPolicy":
        policy = _policy_class()
        globals()[name] = policy
        return policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
