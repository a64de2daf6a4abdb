"""Training metrics handed on through XCom: the leader replica's termination message.

A container may write a short text to its termination-message file (``/dev/termination-log`` unless
the pod template sets ``terminationMessagePath``); when it exits, the kubelet copies it, at most
4096 bytes, into ``status.containerStatuses[].state.terminated.message`` of its pod. The leader
replica (the kinds table says which: PyTorch Master, else worker 0; the MPI launcher) writes its
final metrics there as one JSON object, and the operator's result carries them as ``metrics``.

A TrainJob's trainer may also report metrics to Kubeflow Trainer's status server (``trainerStatus``, see
``trainer_status``): ``combined_metrics`` puts both in the result's ``metrics``. On a name both have, the
termination message wins: the leader writes it once, as it exits, after the last step, while
``trainerStatus.metrics`` is the trainer's latest periodic report (possibly a few steps older, and every
value a string). Names only the trainer reported are added, numbers as numbers.

``leader_metrics`` and ``combined_metrics`` are pure: they read the pods the operator lists at the end of
the task anyway and the job's result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.pods.termination import leader_termination_message


def leader_metrics(kind: JobKind, pods: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """``(metrics, "")`` from the leader's termination message, or ``(None, why there are none)``.

    An MPI launcher retried by its batch Job leaves several pods: the one that succeeded is read.
    """
    found = leader_termination_message(kind, pods)
    if found is None:
        return None, "the leader pod is gone (deleted, e.g. by the job's cleanPodPolicy or TTL)"
    replica, message = found
    text = (message or "").strip()
    if not text:
        return None, f"the leader {replica} wrote no termination message"
    try:
        value = json.loads(text)
    except ValueError as error:
        return None, f"the termination message of the leader {replica} is not JSON ({error}): {text[:80]!r}"
    if not isinstance(value, dict):
        return None, f"the termination message of the leader {replica} is JSON but not an object: {text[:80]!r}"
    return value, ""


def combined_metrics(
    leader: Mapping[str, Any] | None, trainer_status: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The result's ``metrics``: the trainer's reported ``trainerStatus.metrics`` (``trainer_status``: the
    result's ``trainer_status``), overridden name by name by the leader's termination message; None if neither."""
    reported = (trainer_status or {}).get("metrics") or {}
    if leader is None and not reported:
        return None
    return {**reported, **(leader or {})}
