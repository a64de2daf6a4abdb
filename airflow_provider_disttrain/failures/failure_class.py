"""Whose failure was it: the training's own, or the infrastructure's? One table, pure functions.

A failed or timed-out job is classed from what the explanation (``diagnostics.py``) already reads:
the job's Failed condition, each pod's reason, conditions and container states, the failing
containers' last log lines and the Warning events. The class decides what a retry is worth:

- ``training``: the training process itself failed (a non-zero exit, a Python traceback, OOMKilled
  under its memory limit, a command that cannot start). The same job would fail the same way again.
- ``infrastructure``: the cluster took the job away or never gave it room (preemption, eviction, a
  lost node, an image that cannot be pulled, Kueue's WaitForPodsReady, a deadline). A retry, resuming
  from a checkpoint, may well succeed.
- ``unknown``: nothing seen says which (e.g. the pods are gone); the task's own retries apply.

Evidence has a strength, because one failure leaves several traces: when a node is lost, the ranks
on the surviving nodes die with a traceback of their own. So the platform taking pods away
(``DISRUPTION``) outweighs the training's own exit (``OWN``), which outweighs the circumstances of a
job that never got going (``CIRCUMSTANCE``: a deadline, no room to schedule).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_disttrain.failures.diagnostics import Evidence, explain, replica_name
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.job.status import failure_condition


class FailureClass(str, enum.Enum):
    TRAINING = "training"
    INFRASTRUCTURE = "infrastructure"
    UNKNOWN = "unknown"


# Strengths: the strongest evidence decides (see the module docstring).
CIRCUMSTANCE = 1
OWN = 2
DISRUPTION = 3

TRAINING, INFRASTRUCTURE = FailureClass.TRAINING, FailureClass.INFRASTRUCTURE

# (where the reason was seen, the reason) -> (class, strength). ``where`` is one of:
#   pod          the pod's status.reason (set by the kubelet or the node lifecycle controller)
#   disruption   the reason of the pod's DisruptionTarget (or Kueue's older TerminationTarget) condition
#   scheduling   the reason of a PodScheduled=False condition
#   waiting      a container's waiting reason
#   terminated   a container's terminated reason (current or last state), with a non-zero exit or OOMKilled;
#                "*" stands for any other reason of a non-zero exit
#   event        a Warning (or Kueue) event's reason on the job or its pods
#   refusal      a Warning event with which the job's controller refused it (``JobKind.refusal_event_reasons``);
#                "*" stands for any of them: the job as written never runs, whatever a retry does
#   job          the reason of the job's Failed condition
#   log          what the failing container's last log lines show
#   outcome      how the wait ended, when it was not the job failing ("timeout": a deadline passed)
REASONS: dict[tuple[str, str], tuple[FailureClass, int]] = {
    # The training's own failure.
    ("terminated", "OOMKilled"): (TRAINING, OWN),
    ("terminated", "Error"): (TRAINING, OWN),
    ("terminated", "StartError"): (TRAINING, OWN),  # the command cannot be executed
    ("terminated", "*"): (TRAINING, OWN),
    ("waiting", "CrashLoopBackOff"): (TRAINING, OWN),
    ("waiting", "CreateContainerConfigError"): (TRAINING, OWN),  # a Secret/ConfigMap key the pods name is missing
    ("waiting", "CreateContainerError"): (TRAINING, OWN),
    ("waiting", "RunContainerError"): (TRAINING, OWN),
    ("waiting", "InvalidImageName"): (TRAINING, OWN),
    ("log", "Traceback"): (TRAINING, OWN),
    ("refusal", "*"): (TRAINING, OWN),
    # The infrastructure took the pods away.
    ("pod", "Evicted"): (INFRASTRUCTURE, DISRUPTION),
    ("pod", "NodeLost"): (INFRASTRUCTURE, DISRUPTION),
    ("pod", "Shutdown"): (INFRASTRUCTURE, DISRUPTION),  # graceful node shutdown
    ("pod", "Terminated"): (INFRASTRUCTURE, DISRUPTION),
    ("pod", "UnexpectedAdmissionError"): (INFRASTRUCTURE, DISRUPTION),  # e.g. a GPU the device plugin lost
    ("disruption", "PreemptionByScheduler"): (INFRASTRUCTURE, DISRUPTION),
    ("disruption", "PreemptionByKubeScheduler"): (INFRASTRUCTURE, DISRUPTION),  # Kubernetes < 1.28
    ("disruption", "EvictionByEvictionAPI"): (INFRASTRUCTURE, DISRUPTION),  # a node drain
    ("disruption", "DeletionByTaintManager"): (INFRASTRUCTURE, DISRUPTION),  # the node went NotReady
    ("disruption", "DeletionByPodGC"): (INFRASTRUCTURE, DISRUPTION),  # the node is gone
    ("disruption", "TerminationByKubelet"): (INFRASTRUCTURE, DISRUPTION),  # node-pressure eviction
    ("disruption", "Preempted"): (INFRASTRUCTURE, DISRUPTION),  # Kueue
    ("disruption", "WorkloadEvictedDueToPodsReadyTimeout"): (INFRASTRUCTURE, DISRUPTION),  # Kueue
    ("terminated", "Evicted"): (INFRASTRUCTURE, DISRUPTION),
    ("terminated", "ContainerStatusUnknown"): (INFRASTRUCTURE, DISRUPTION),  # the node stopped reporting
    ("waiting", "ImagePullBackOff"): (INFRASTRUCTURE, DISRUPTION),
    ("waiting", "ErrImagePull"): (INFRASTRUCTURE, DISRUPTION),
    ("event", "Evicted"): (INFRASTRUCTURE, DISRUPTION),
    ("event", "Preempted"): (INFRASTRUCTURE, DISRUPTION),
    ("event", "NodeNotReady"): (INFRASTRUCTURE, DISRUPTION),
    ("event", "TaintManagerEviction"): (INFRASTRUCTURE, DISRUPTION),
    ("event", "EvictedDueToPodsReadyTimeout"): (INFRASTRUCTURE, DISRUPTION),  # Kueue's WaitForPodsReady
    # The job never got going, or ran out of time: the training had no say.
    ("job", "DeadlineExceeded"): (INFRASTRUCTURE, CIRCUMSTANCE),  # runPolicy.activeDeadlineSeconds
    ("scheduling", "Unschedulable"): (INFRASTRUCTURE, CIRCUMSTANCE),
    ("event", "FailedScheduling"): (INFRASTRUCTURE, CIRCUMSTANCE),
    ("outcome", "timeout"): (INFRASTRUCTURE, CIRCUMSTANCE),
}

TRACEBACK = "Traceback (most recent call last):"


@dataclass(frozen=True)
class FailureCause:
    """The class of a failure, the reason that decided it and what was seen (one line per trace)."""

    failure_class: FailureClass
    reason: str
    evidence: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe, for XCom and the exception's ``failure``."""
        return {"class": self.failure_class.value, "reason": self.reason, "evidence": list(self.evidence)}

    def describe(self) -> str:
        """One line for the task log, saying what a retry is worth."""
        if self.failure_class is FailureClass.TRAINING:
            advice = "the training's own failure: a retry of the same job would fail the same way"
        elif self.failure_class is FailureClass.INFRASTRUCTURE:
            advice = "the infrastructure's failure: a retry may succeed"
        else:
            return "Failure class: unknown (nothing seen says whether the training or the infrastructure failed)"
        return f"Failure class: {self.failure_class.value} ({self.reason}), {advice}"


@dataclass(frozen=True)
class _Trace:
    where: str
    reason: str
    evidence: str


def _memory_limit(pod: Mapping[str, Any], container: str) -> str | None:
    for spec in (pod.get("spec") or {}).get("containers") or []:
        if spec.get("name") == container:
            return ((spec.get("resources") or {}).get("limits") or {}).get("memory")
    return None


def _container_traces(replica: str, pod: Mapping[str, Any]) -> Iterable[_Trace]:
    status = pod.get("status") or {}
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        name = container.get("name")
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            message = f": {waiting['message']}" if waiting.get("message") else ""
            yield _Trace("waiting", waiting["reason"], f"{replica}: container {name} {waiting['reason']}{message}")
        for state in (container.get("state") or {}, container.get("lastState") or {}):
            ended = state.get("terminated") or {}
            reason, code = ended.get("reason") or "Error", ended.get("exitCode")
            if not ended or (code in (0, None) and reason != "OOMKilled"):
                continue
            detail = f"{replica}: container {name} {reason}, exit code {code}"
            if reason == "OOMKilled":
                limit = _memory_limit(pod, str(name))
                detail += f" (memory limit {limit})" if limit else " (no memory limit: the node ran out of memory)"
            yield _Trace("terminated", reason, detail)
            break


def _pod_traces(kind: JobKind, pod: Mapping[str, Any]) -> Iterable[_Trace]:
    replica = replica_name(kind, pod)
    status = pod.get("status") or {}
    if status.get("reason"):
        reason = status["reason"]
        yield _Trace("pod", reason, f"{replica}: pod {reason}: {status.get('message') or ''}".strip())
    for condition in status.get("conditions") or []:
        kind_of, reason = condition.get("type"), condition.get("reason") or ""
        true = str(condition.get("status")).lower() == "true"
        if kind_of in ("DisruptionTarget", "TerminationTarget") and true:
            yield _Trace("disruption", reason, f"{replica}: {reason}: {condition.get('message') or ''}".strip())
        if kind_of == "PodScheduled" and not true:
            reason = reason or "Unschedulable"
            yield _Trace("scheduling", reason, f"{replica}: {reason}: {condition.get('message') or ''}".strip())
    yield from _container_traces(replica, pod)


def _log_traces(log_tails: Mapping[str, str]) -> Iterable[_Trace]:
    for pod_name, tail in log_tails.items():
        if (exception := exception_line(tail)) is not None:
            yield _Trace("log", "Traceback", f"{pod_name}: {exception}")


def exception_line(log: str) -> str | None:
    """The exception a Python traceback in ``log`` ends with; None without a traceback.

    Not simply the log's last line: stdout and stderr are two streams, and a line the script printed
    before raising can be logged after the traceback (seen on the local cluster), as can a logging
    thread's. The exception is the first unindented line after the last traceback's header (frames are
    indented; a chained exception's own traceback comes last).
    """
    lines = log.splitlines()
    headers = [i for i, line in enumerate(lines) if line.strip() == TRACEBACK]
    if not headers:
        return None
    after = [line for line in lines[headers[-1] + 1 :] if line.strip()]
    unindented = next((line.strip() for line in after if not line[:1].isspace()), None)
    # A tail cut inside the frames has no exception line: its last line is the best there is.
    return unindented or (after[-1].strip() if after else TRACEBACK)


def traces(
    kind: JobKind,
    status: str,
    job: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    log_tails: Mapping[str, str] | None,
) -> list[_Trace]:
    """Every reason seen, where it was seen, and a line saying so."""
    found: list[_Trace] = []
    if status != "failed":
        found.append(_Trace("outcome", status, f"the wait ended: {status}"))
    if job and (failure := failure_condition(job)):
        found.append(_Trace("job", failure[0], f"Failed condition: {failure[0]}: {failure[1]}".rstrip(": ")))
    for pod in pods:
        found.extend(_pod_traces(kind, pod))
    found.extend(_log_traces(log_tails or {}))
    for event in events:
        involved = (event.get("involvedObject") or {}).get("name")
        message = str(event.get("message") or "").strip()
        where = "refusal" if event.get("reason") in kind.refusal_event_reasons else "event"
        found.append(_Trace(where, str(event.get("reason")), f"{involved}: {event.get('reason')}: {message}"))
    return found


def _judged(trace: _Trace) -> tuple[FailureClass, int] | None:
    return REASONS.get((trace.where, trace.reason)) or (
        REASONS.get((trace.where, "*")) if trace.where in ("terminated", "refusal") else None
    )


def classify(
    kind: JobKind,
    status: str,
    job: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]] = (),
    log_tails: Mapping[str, str] | None = None,
) -> FailureCause:
    """The class of a job's failure (``status``: the outcome's, ``failed`` or ``timeout``), from what was seen.

    The strongest evidence decides; on a tie, the first seen (the job, then each pod, the logs, the
    events). The evidence listed is what points the same way as the decision.
    """
    seen = traces(kind, status, job, pods, events, log_tails)
    judged = [(trace, verdict) for trace in seen if (verdict := _judged(trace))]
    if not judged:
        return FailureCause(FailureClass.UNKNOWN, "no telling reason")
    strongest = max(strength for _, (_, strength) in judged)
    deciding, (failure_class, _) = next((t, v) for t, v in judged if v[1] == strongest)
    evidence = tuple(dict.fromkeys(t.evidence for t, (cls, _) in judged if cls is failure_class))
    return FailureCause(failure_class, deciding.reason, evidence)


def diagnose(
    kind: JobKind, title: str, status: str, headline: str, job: Mapping[str, Any] | None, evidence: Evidence
) -> tuple[str, FailureCause]:
    """The explanation of a wait that did not succeed (``status``: ``failed``, ``timeout``...) and whose
    failure it was, both judged from the same evidence (what the hook read: ``collect_evidence``)."""
    pods, events, tails = evidence.pods, evidence.events, evidence.log_tails
    return explain(kind, title, headline, job, pods, events, tails), classify(kind, status, job, pods, events, tails)
