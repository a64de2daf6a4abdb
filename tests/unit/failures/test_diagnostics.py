"""Explaining a failed or stuck job from its pods and events, in words an on-call engineer can act on."""

from __future__ import annotations

import copy

import pytest

from airflow_provider_disttrain.failures.diagnostics import (
    MAX_EVENTS,
    explain,
    failing_container,
    pod_problems,
    pods_with_problems,
    replica_name,
)
from airflow_provider_disttrain.job.kinds import JOB_KINDS

PYTORCH = JOB_KINDS["PyTorchJob"]
MPI = JOB_KINDS["MPIJob"]


def mpi_pod(name: str, role: str, index: str | None = None, phase: str = "Running") -> dict:
    labels = {
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-role": role,
    }
    if index is not None:
        labels["training.kubeflow.org/replica-index"] = index
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": f"mpi-{role}", "image": "mpioperator/mpi-pi:openmpi"}]},
        "status": {"phase": phase},
    }


def running_pod(name: str, replica_type: str, index: str) -> dict:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "training.kubeflow.org/job-name": "pytorch-simple",
                "training.kubeflow.org/replica-type": replica_type,
                "training.kubeflow.org/replica-index": index,
            },
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2024-05-14T09:12:30Z"}},
                    "lastState": {},
                }
            ],
        },
    }


def warning_event(involved: str, reason: str, message: str, kind: str = "Pod") -> dict:
    return {
        "type": "Warning",
        "involvedObject": {"kind": kind, "name": involved, "namespace": "kubeflow"},
        "reason": reason,
        "message": message,
        "lastTimestamp": "2024-05-14T09:14:09Z",
    }


# -- pod_problems -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("pods/oomkilled.yaml", ["container pytorch: OOMKilled, exit code 137"]),
        ("pods/exit-code-1.yaml", ["container pytorch: Error, exit code 1"]),
        (
            "pods/imagepullbackoff.yaml",
            [
                "container pytorch: ImagePullBackOff: "
                'Back-off pulling image "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-does-not-exist"'
            ],
        ),
        (
            "pods/crashloopbackoff.yaml",
            [
                "container pytorch: CrashLoopBackOff: back-off 1m20s restarting failed container=pytorch "
                "pod=pytorch-simple-worker-1_kubeflow(3d4e5f6a-7b8c-4d9e-8f0a-1b2c3d4e5f6a); "
                "Error, exit code 1 (restarted 4x)"
            ],
        ),
        (
            "pods/unschedulable.yaml",
            [
                "Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes "
                "are available: 2 No preemption victims found for incoming pod."
            ],
        ),
    ],
)
def test_pod_problems_says_what_kubernetes_said(load_yaml, fixture, expected):
    assert pod_problems(load_yaml(fixture)) == expected


def test_a_healthy_running_pod_has_no_problems():
    assert pod_problems(running_pod("pytorch-simple-master-0", "master", "0")) == []


def test_a_container_that_completed_is_no_problem():
    pod = running_pod("pytorch-simple-worker-0", "worker", "0")
    pod["status"]["phase"] = "Succeeded"
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    assert pod_problems(pod) == []


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing"])
def test_a_container_that_is_still_starting_is_no_problem(reason):
    pod = running_pod("pytorch-simple-worker-0", "worker", "0")
    pod["status"]["phase"] = "Pending"
    pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": reason}}
    assert pod_problems(pod) == []


def test_a_terminated_container_message_is_included():
    pod = running_pod("pytorch-simple-worker-0", "worker", "0")
    pod["status"]["containerStatuses"][0]["state"] = {
        "terminated": {"exitCode": 2, "reason": "Error", "message": "  CUDA error: out of memory\n"}
    }
    assert pod_problems(pod) == ["container pytorch: Error, exit code 2; CUDA error: out of memory"]


def test_a_terminated_container_without_reason_is_an_error():
    pod = running_pod("pytorch-simple-worker-0", "worker", "0")
    pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 139}}
    assert pod_problems(pod) == ["container pytorch: Error, exit code 139"]


def test_a_failing_init_container_is_reported_before_the_main_container():
    pod = running_pod("pytorch-simple-worker-0", "worker", "0")
    pod["status"]["phase"] = "Pending"
    pod["status"]["initContainerStatuses"] = [
        {"name": "init-pytorch", "restartCount": 2, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    ]
    pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "PodInitializing"}}

    assert pod_problems(pod) == ["container init-pytorch: Error, exit code 1 (restarted 2x)"]


def test_an_evicted_pod_reports_the_pod_reason():
    pod = running_pod("pytorch-simple-worker-0", "worker", "0")
    pod["status"].update(
        {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: ephemeral-storage.",
            "containerStatuses": [],
        }
    )
    assert pod_problems(pod) == ["pod Evicted: The node was low on resource: ephemeral-storage."]


def test_a_pod_without_status_has_no_problems_to_report():
    assert pod_problems({"metadata": {"name": "pytorch-simple-worker-0"}}) == []


def test_pods_with_problems_keeps_only_the_troubled_ones(load_yaml):
    healthy = running_pod("pytorch-simple-master-0", "master", "0")
    oom = load_yaml("pods/oomkilled.yaml")
    pending = load_yaml("pods/unschedulable.yaml")

    assert pods_with_problems([healthy, oom, pending]) == [oom, pending]


# -- failing_container ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        # The container that failed is the current one: its log is the current log.
        ("pods/oomkilled.yaml", ("pytorch", False)),
        ("pods/exit-code-1.yaml", ("pytorch", False)),
        # Crash-looping: the current state is waiting, the last run ended with exit code 1, so the
        # log that explains it is the previous container's.
        ("pods/crashloopbackoff.yaml", ("pytorch", True)),
        # Never ran: no log worth fetching.
        ("pods/imagepullbackoff.yaml", None),
        ("pods/unschedulable.yaml", None),
    ],
)
def test_failing_container_names_the_container_and_which_of_its_logs_explains_the_failure(load_yaml, fixture, expected):
    assert failing_container(load_yaml(fixture)) == expected


def test_failing_container_picks_the_container_that_failed_not_a_sidecar():
    pod = running_pod("pytorch-simple-worker-0", "worker", "0")
    pod["status"]["containerStatuses"] = [
        {"name": "istio-proxy", "state": {"running": {}}},
        {"name": "pytorch", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
    ]
    assert failing_container(pod) == ("pytorch", False)


def test_a_container_restarted_by_on_failure_is_explained_by_its_previous_log():
    """restartPolicy OnFailure (the PyTorchJob default): the kubelet restarted the container, which runs
    again; the failure is only in ``lastState.terminated`` and the current log is the new run's."""
    pod = running_pod("pytorch-simple-worker-0", "worker", "0")
    pod["status"]["containerStatuses"] = [
        {
            "name": "pytorch",
            "restartCount": 1,
            "state": {"running": {"startedAt": "2024-05-14T09:15:10Z"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }
    ]
    assert failing_container(pod) == ("pytorch", True)


# -- replica_name -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        ("pods/oomkilled.yaml", "master-0"),
        ("pods/exit-code-1.yaml", "worker-0"),
        ("pods/crashloopbackoff.yaml", "worker-1"),
    ],
)
def test_replica_name_of_a_training_operator_pod_comes_from_replica_type_and_index(load_yaml, fixture, expected):
    assert replica_name(PYTORCH, load_yaml(fixture)) == expected


def test_replica_name_of_mpi_pods_comes_from_the_job_role():
    assert replica_name(MPI, mpi_pod("pi-launcher-x7k2p", "launcher")) == "launcher"
    assert replica_name(MPI, mpi_pod("pi-worker-1", "worker", "1")) == "worker-1"


def test_replica_name_falls_back_to_the_pod_name_without_operator_labels():
    pod = {"metadata": {"name": "debug-pod", "labels": {"app": "debug"}}}
    assert replica_name(PYTORCH, pod) == "debug-pod"


def test_replica_name_reads_the_kinds_own_label(load_yaml):
    # A PyTorch master pod carries job-role=master too, but an MPIJob reads only job-role.
    pod = load_yaml("pods/oomkilled.yaml")
    assert replica_name(MPI, pod) == "master-0"
    del pod["metadata"]["labels"]["training.kubeflow.org/job-role"]
    assert replica_name(MPI, pod) == "pytorch-simple-master-0"


# -- explain ----------------------------------------------------------------------------------------


def test_explain_a_failed_pytorchjob(load_yaml):
    job = load_yaml("status/pytorchjob-failed.yaml")
    master = load_yaml("pods/oomkilled.yaml")
    worker = running_pod("pytorch-simple-worker-0", "worker", "0")
    events = [
        warning_event("pytorch-simple-master-0", "BackOff", "Back-off restarting failed container pytorch"),
        warning_event(
            "pytorch-simple",
            "PyTorchJobFailed",
            "PyTorchJob kubeflow/pytorch-simple is failed because 1 Master replica(s) failed.\n",
            kind="PyTorchJob",
        ),
    ]
    tails = {
        "pytorch-simple-master-0": (
            "Train Epoch: 1 [55040/60000 (92%)]\tloss: 0.1183\nTrain Epoch: 1 [55680/60000 (93%)]\tloss: 0.0951\n"
        )
    }

    text = explain(
        PYTORCH,
        "PyTorchJob kubeflow/pytorch-simple",
        "PyTorchJob kubeflow/pytorch-simple failed",
        job,
        [worker, master],
        events,
        tails,
    )

    assert text.splitlines() == [
        "PyTorchJob kubeflow/pytorch-simple failed",
        "Failed condition: PyTorchJobFailed: "
        "PyTorchJob kubeflow/pytorch-simple is failed because 1 Master replica(s) failed.",
        "Replicas of PyTorchJob kubeflow/pytorch-simple:",
        "  master-0 (pytorch-simple-master-0): Failed - container pytorch: OOMKilled, exit code 137",
        "  worker-0 (pytorch-simple-worker-0): Running",
        "Last log lines of pytorch-simple-master-0:",
        "  | Train Epoch: 1 [55040/60000 (92%)]\tloss: 0.1183",
        "  | Train Epoch: 1 [55680/60000 (93%)]\tloss: 0.0951",
        "Recent Warning events:",
        "  pytorch-simple-master-0: BackOff: Back-off restarting failed container pytorch",
        "  pytorch-simple: PyTorchJobFailed: "
        "PyTorchJob kubeflow/pytorch-simple is failed because 1 Master replica(s) failed.",
    ]


def test_explain_a_job_stuck_in_the_queue(load_yaml):
    job = load_yaml("status/pytorchjob-running.yaml")
    master = load_yaml("pods/imagepullbackoff.yaml")
    master["metadata"]["name"] = "pytorch-simple-master-0"
    master["metadata"]["labels"].update(
        {"training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0"}
    )
    worker = load_yaml("pods/unschedulable.yaml")
    events = [
        warning_event(
            "pytorch-simple-worker-0",
            "FailedScheduling",
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
            "2 No preemption victims found for incoming pod.",
        )
    ]

    text = explain(
        PYTORCH,
        "PyTorchJob kubeflow/pytorch-simple",
        "PyTorchJob kubeflow/pytorch-simple did not start within startup_timeout",
        job,
        [worker, master],
        events,
    )

    lines = text.splitlines()
    assert lines[0] == "PyTorchJob kubeflow/pytorch-simple did not start within startup_timeout"
    assert not any(line.startswith("Failed condition") for line in lines)
    assert lines[2].startswith("  master-0 (pytorch-simple-master-0): Pending - container pytorch: ImagePullBackOff")
    assert lines[3] == (
        "  worker-0 (pytorch-simple-worker-0): Pending - Unschedulable: 0/2 nodes are available: "
        "2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption victims found "
        "for incoming pod."
    )
    assert "Last log lines" not in text
    assert lines[-2:] == [
        "Recent Warning events:",
        "  pytorch-simple-worker-0: FailedScheduling: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.",
    ]


def test_explain_an_mpijob_lists_launcher_and_workers():
    launcher = mpi_pod("pi-launcher-x7k2p", "launcher", phase="Failed")
    launcher["status"]["containerStatuses"] = [
        {"name": "mpi-launcher", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    ]
    workers = [mpi_pod("pi-worker-1", "worker", "1"), mpi_pod("pi-worker-0", "worker", "0")]

    text = explain(MPI, "MPIJob default/pi", "MPIJob default/pi failed", None, [*workers, launcher], [])

    assert text.splitlines() == [
        "MPIJob default/pi failed",
        "Replicas of MPIJob default/pi:",
        "  launcher (pi-launcher-x7k2p): Failed - container mpi-launcher: Error, exit code 1",
        "  worker-0 (pi-worker-0): Running",
        "  worker-1 (pi-worker-1): Running",
    ]


def test_explain_with_nothing_but_the_headline():
    assert explain(PYTORCH, "PyTorchJob kubeflow/gone", "PyTorchJob kubeflow/gone no longer exists", None, [], []) == (
        "PyTorchJob kubeflow/gone no longer exists"
    )


def test_explain_a_failed_condition_without_message(load_yaml):
    job = load_yaml("status/pytorchjob-failed.yaml")
    job["status"]["conditions"][-1].pop("message")

    text = explain(PYTORCH, "PyTorchJob kubeflow/pytorch-simple", "failed", job, [], [])

    assert text.splitlines() == ["failed", "Failed condition: PyTorchJobFailed"]


def test_explain_skips_empty_log_tails_and_pods_without_phase():
    pod = {"metadata": {"name": "pytorch-simple-worker-0"}}
    text = explain(PYTORCH, "PyTorchJob kubeflow/pytorch-simple", "failed", None, [pod], [], {"x": "  \n"})
    assert text.splitlines() == [
        "failed",
        "Replicas of PyTorchJob kubeflow/pytorch-simple:",
        "  pytorch-simple-worker-0 (pytorch-simple-worker-0): Unknown",
    ]


def test_explain_keeps_only_the_most_recent_events():
    events = [warning_event(f"pytorch-simple-worker-{i}", "BackOff", f"event {i}") for i in range(MAX_EVENTS + 5)]

    lines = explain(PYTORCH, "t", "failed", None, [], events).splitlines()

    assert lines[1] == "Recent Warning events:"
    assert len(lines) == 2 + MAX_EVENTS
    assert lines[2] == "  pytorch-simple-worker-5: BackOff: event 5"
    assert lines[-1] == f"  pytorch-simple-worker-{MAX_EVENTS + 4}: BackOff: event {MAX_EVENTS + 4}"


def test_explain_does_not_modify_its_inputs(load_yaml):
    job = load_yaml("status/pytorchjob-failed.yaml")
    pods = [load_yaml("pods/oomkilled.yaml"), load_yaml("pods/exit-code-1.yaml")]
    before = copy.deepcopy((job, pods))

    explain(PYTORCH, "t", "failed", job, pods, [])

    assert (job, pods) == before
