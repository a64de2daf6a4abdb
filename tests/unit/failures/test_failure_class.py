"""Whose failure it was, from real pod and job statuses: the training's own, or the infrastructure's."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_disttrain.failures.failure_class import REASONS, FailureClass, classify, exception_line
from airflow_provider_disttrain.job.kinds import JOB_KINDS

PYTORCH = JOB_KINDS["PyTorchJob"]
TRAINING, INFRASTRUCTURE, UNKNOWN = FailureClass.TRAINING, FailureClass.INFRASTRUCTURE, FailureClass.UNKNOWN

TRACEBACK_TAIL = """epoch=1 loss=0.6931
Traceback (most recent call last):
  File "/workspace/train.py", line 3, in <module>
ValueError: loss is nan at step 7
"""


def evicted(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as the kubelet leaves it after a node-pressure eviction (Kubernetes 1.36)."""
    status = pod["status"]
    status.update(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
    status["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet", "message": "memory pressure"}
    )
    return pod


def preempted(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as the scheduler marks a victim of priority preemption before deleting it."""
    pod["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "kube-scheduler: preempting to accommodate a higher priority pod",
        }
    )
    return pod


def node_lost(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` after the taint manager evicted it from a node that went NotReady."""
    pod["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager", "message": "Taint manager"}
    )
    return pod


# (job status fixture, pod fixtures with a change, how the wait ended, log tails, events) -> class, deciding reason
CASES: list[tuple[str, str | None, list[tuple[str, Callable[[dict], dict] | None]], str, dict, list, Any, str]] = [
    ("exit-code-1", "status/pytorchjob-failed.yaml", [("pods/exit-code-1.yaml", None)], "failed", {}, [],
     TRAINING, "Error"),
    ("traceback", "status/pytorchjob-failed.yaml", [("pods/exit-code-1.yaml", None)], "failed",
     {"pytorch-simple-worker-0": TRACEBACK_TAIL}, [], TRAINING, "Error"),
    ("oomkilled", "status/pytorchjob-failed.yaml", [("pods/oomkilled.yaml", None)], "failed", {}, [],
     TRAINING, "OOMKilled"),
    ("crash-loop-until-the-deadline", None, [("pods/crashloopbackoff.yaml", None)], "timeout", {}, [],
     TRAINING, "CrashLoopBackOff"),
    ("trainjob-failed-no-pods", "status/trainjob-failed.yaml", [], "failed", {}, [], UNKNOWN, "no telling reason"),
    ("image-pull", None, [("pods/imagepullbackoff.yaml", None)], "timeout", {}, [], INFRASTRUCTURE, "ImagePullBackOff"),
    ("unschedulable-until-the-deadline", None, [("pods/unschedulable.yaml", None)], "timeout", {}, [],
     INFRASTRUCTURE, "timeout"),
    ("evicted", "status/pytorchjob-failed.yaml", [("pods/exit-code-1.yaml", evicted)], "failed", {}, [],
     INFRASTRUCTURE, "Evicted"),
    # A lost rank takes the others down with a traceback of their own: the disruption decides.
    ("preempted-peer-raised", "status/pytorchjob-failed.yaml",
     [("pods/oomkilled.yaml", preempted), ("pods/exit-code-1.yaml", None)], "failed",
     {"pytorch-simple-worker-0": TRACEBACK_TAIL}, [], INFRASTRUCTURE, "PreemptionByScheduler"),
    ("node-lost", "status/pytorchjob-failed.yaml", [("pods/exit-code-1.yaml", node_lost)], "failed", {}, [],
     INFRASTRUCTURE, "DeletionByTaintManager"),
    ("kueue-pods-ready-timeout-event", "status/pytorchjob-failed.yaml", [], "failed", {},
     [{"reason": "EvictedDueToPodsReadyTimeout", "message": "Exceeded the PodsReady timeout ns/wl",
       "involvedObject": {"name": "pytorch-simple"}}], INFRASTRUCTURE, "EvictedDueToPodsReadyTimeout"),
    ("queued-until-the-deadline", "status/pytorchjob-suspended.yaml", [], "timeout", {}, [], INFRASTRUCTURE, "timeout"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("job_file", "pod_files", "status", "tails", "events", "expected", "reason"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_a_failure_is_classed_by_the_strongest_evidence(
    load_yaml: Callable[[str], dict[str, Any]],
    job_file: str | None,
    pod_files: list[tuple[str, Callable[[dict], dict] | None]],
    status: str,
    tails: dict[str, str],
    events: list[dict[str, Any]],
    expected: FailureClass,
    reason: str,
) -> None:
    job = load_yaml(job_file) if job_file else None
    pods = [(change or (lambda pod: pod))(load_yaml(path)) for path, change in pod_files]

    cause = classify(PYTORCH, status, job, pods, events, tails)

    assert (cause.failure_class, cause.reason) == (expected, reason)
    assert json.loads(json.dumps(cause.as_dict())) == cause.as_dict()  # XCom-safe as it is


def test_oomkilled_names_the_memory_limit(load_yaml: Callable[[str], dict[str, Any]]) -> None:
    cause = classify(PYTORCH, "failed", load_yaml("status/pytorchjob-failed.yaml"), [load_yaml("pods/oomkilled.yaml")])

    assert cause.evidence == ("master-0: container pytorch OOMKilled, exit code 137 (memory limit 2Gi)",)
    assert cause.describe() == (
        "Failure class: training (OOMKilled), the training's own failure: "
        "a retry of the same job would fail the same way"
    )


def test_a_traceback_is_quoted_by_its_exception_line(load_yaml: Callable[[str], dict[str, Any]]) -> None:
    pods = [load_yaml("pods/exit-code-1.yaml")]
    cause = classify(PYTORCH, "failed", None, pods, [], {"pytorch-simple-worker-0": TRACEBACK_TAIL})

    assert cause.as_dict() == {
        "class": "training",
        "reason": "Error",
        "evidence": [
            "worker-0: container pytorch Error, exit code 1",
            "pytorch-simple-worker-0: ValueError: loss is nan at step 7",
        ],
    }


@pytest.mark.parametrize(
    ("log", "exception"),
    [
        # stdout's line logged after stderr's traceback (two streams; seen on the local cluster)
        (
            'Traceback (most recent call last):\n  File "<string>", line 3, in <module>\n'
            "ValueError: loss is nan at step 7\nepoch=1 loss=0.6931\n",
            "ValueError: loss is nan at step 7",
        ),
        # a chained exception: the last traceback's exception is the one that ended the process
        (
            "Traceback (most recent call last):\n  File \"train.py\", line 9, in load\nKeyError: 'shard'\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            'Traceback (most recent call last):\n  File "train.py", line 12, in <module>\n    load()\n'
            "    ^^^^^^\nRuntimeError: no shard 3\n",
            "RuntimeError: no shard 3",
        ),
        # a tail cut inside the frames
        (
            'Traceback (most recent call last):\n  File "train.py", line 12, in <module>\n',
            'File "train.py", line 12, in <module>',
        ),
        ("epoch=1 loss=0.6931\nexit\n", None),
    ],
    ids=["stdout-after-stderr", "chained", "cut-in-the-frames", "no-traceback"],
)
def test_the_exception_of_a_traceback_is_its_first_unindented_line(log: str, exception: str | None) -> None:
    assert exception_line(log) == exception


def test_the_evidence_lists_only_what_points_to_the_decided_class(load_yaml: Callable[[str], dict[str, Any]]) -> None:
    pods = [evicted(load_yaml("pods/exit-code-1.yaml"))]
    cause = classify(PYTORCH, "failed", load_yaml("status/pytorchjob-failed.yaml"), pods)

    assert cause.failure_class is INFRASTRUCTURE
    assert cause.evidence == (
        "worker-0: pod Evicted: The node was low on resource: memory.",
        "worker-0: TerminationByKubelet: memory pressure",
    )
    assert "exit code 1" not in " ".join(cause.evidence)
    assert cause.describe().startswith("Failure class: infrastructure (Evicted), the infrastructure's failure")


def test_a_healthy_running_pod_says_nothing(load_yaml: Callable[[str], dict[str, Any]]) -> None:
    pod = load_yaml("pods/exit-code-1.yaml")
    pod["status"] = {"phase": "Running", "containerStatuses": [{"name": "pytorch", "state": {"running": {}}}]}

    assert classify(PYTORCH, "failed", None, [pod]).failure_class is UNKNOWN
    assert "unknown" in classify(PYTORCH, "failed", None, [pod]).describe()


def test_every_reason_in_the_table_is_classed_and_placed() -> None:
    places = {"pod", "disruption", "scheduling", "waiting", "terminated", "event", "refusal", "job", "log", "outcome"}
    assert {where for where, _ in REASONS} <= places
    assert {cls for cls, _ in REASONS.values()} == {TRAINING, INFRASTRUCTURE}
