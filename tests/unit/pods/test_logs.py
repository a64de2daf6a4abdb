"""Choosing whose logs go to the task log, and copying only new lines on every poll."""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence

import pytest

import airflow_provider_disttrain.pods.logs as logs_module
from airflow_provider_disttrain.job.kinds import JOB_KINDS, JOB_NAME_LABEL
from airflow_provider_disttrain.pods.logs import (
    ALL,
    LEADER,
    NONE,
    LogForwarder,
    leader_pods,
    log_targets,
    validate_log_replicas,
)
from tests.unit.fakes import LOG_START_NS, FakeTrainingJobHook

PYTORCH = JOB_KINDS["PyTorchJob"]
MPI = JOB_KINDS["MPIJob"]
JAX = JOB_KINDS["JAXJob"]


def v1_pod(job: str, replica_type: str, index: int, container: str = "pytorch", sidecar: bool = False) -> dict:
    containers = [{"name": container, "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"}]
    if sidecar:
        containers.insert(0, {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.22.0"})
    return {
        "metadata": {
            "name": f"{job}-{replica_type}-{index}",
            "namespace": "kubeflow",
            "labels": {
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": replica_type,
                "training.kubeflow.org/replica-index": str(index),
            },
        },
        "spec": {"containers": containers},
    }


def mpi_pod(name: str, role: str, index: int | None = None) -> dict:
    labels = {
        "training.kubeflow.org/job-name": "pi",
        "training.kubeflow.org/operator-name": "mpi-operator",
        "training.kubeflow.org/job-role": role,
    }
    if index is not None:
        labels["training.kubeflow.org/replica-index"] = str(index)
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": f"mpi-{role}", "image": "mpioperator/mpi-pi:openmpi"}]},
    }


# The API lists pods in no particular order; the targets come back sorted by pod name.
PYTORCH_PODS = [
    v1_pod("mnist", "worker", 1),
    v1_pod("mnist", "master", 0),
    v1_pod("mnist", "worker", 0),
]
ELASTIC_PODS = [v1_pod("elastic", "worker", 2), v1_pod("elastic", "worker", 0), v1_pod("elastic", "worker", 1)]
MPI_PODS = [
    mpi_pod("pi-worker-1", "worker", 1),
    mpi_pod("pi-launcher-8xq2v", "launcher"),
    mpi_pod("pi-worker-0", "worker", 0),
]


# -- log_targets ------------------------------------------------------------------------------------


def test_the_leader_of_a_pytorchjob_is_master_0():
    assert log_targets(PYTORCH, PYTORCH_PODS, LEADER) == [("mnist-master-0", "pytorch")]


def test_the_leader_of_an_elastic_pytorchjob_without_master_is_worker_0():
    assert log_targets(PYTORCH, ELASTIC_PODS, LEADER) == [("elastic-worker-0", "pytorch")]


def test_the_leader_of_a_jaxjob_is_worker_0():
    pods = [v1_pod("jax", "worker", 1, container="jax"), v1_pod("jax", "worker", 0, container="jax")]
    assert log_targets(JAX, pods, LEADER) == [("jax-worker-0", "jax")]


def test_the_leader_of_an_mpijob_is_the_launcher_found_by_its_job_role_label():
    # The launcher pod name comes from its batch Job and has a random suffix, no replica index.
    assert log_targets(MPI, MPI_PODS, LEADER) == [("pi-launcher-8xq2v", "mpi-launcher")]


def test_every_launcher_pod_of_a_retried_mpi_launcher_job_is_followed():
    pods = [*MPI_PODS, mpi_pod("pi-launcher-2bdkq", "launcher")]
    assert log_targets(MPI, pods, LEADER) == [
        ("pi-launcher-2bdkq", "mpi-launcher"),
        ("pi-launcher-8xq2v", "mpi-launcher"),
    ]


def test_no_leader_before_the_pods_exist():
    assert log_targets(PYTORCH, [], LEADER) == []
    assert leader_pods(PYTORCH, []) == []


def test_a_master_with_index_other_than_0_is_not_the_leader():
    pods = [v1_pod("mnist", "master", 1), v1_pod("mnist", "worker", 0)]
    assert log_targets(PYTORCH, pods, LEADER) == [("mnist-worker-0", "pytorch")]


def test_all_follows_every_pod_in_name_order():
    assert log_targets(PYTORCH, PYTORCH_PODS, ALL) == [
        ("mnist-master-0", "pytorch"),
        ("mnist-worker-0", "pytorch"),
        ("mnist-worker-1", "pytorch"),
    ]


def test_all_for_mpi_uses_each_pods_first_container():
    assert log_targets(MPI, MPI_PODS, ALL) == [
        ("pi-launcher-8xq2v", "mpi-launcher"),
        ("pi-worker-0", "mpi-worker"),
        ("pi-worker-1", "mpi-worker"),
    ]


def test_none_follows_nobody():
    assert log_targets(PYTORCH, PYTORCH_PODS, NONE) == []


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (["worker-1"], ["mnist-worker-1"]),
        (["master-0", "worker-1"], ["mnist-master-0", "mnist-worker-1"]),
        (["Master-0"], ["mnist-master-0"]),
        (("worker",), ["mnist-worker-0", "mnist-worker-1"]),
        (["chief-0"], []),
        ([], []),
    ],
    ids=["one replica", "two replicas", "case-insensitive", "a whole replica type", "no such replica", "empty"],
)
def test_an_explicit_list_of_replicas(wanted, expected):
    assert [name for name, _ in log_targets(PYTORCH, PYTORCH_PODS, wanted)] == expected


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        (["launcher"], ["pi-launcher-8xq2v"]),
        (["worker-0"], ["pi-worker-0"]),
        (["worker"], ["pi-worker-0", "pi-worker-1"]),
    ],
)
def test_an_explicit_list_of_mpi_replicas(wanted, expected):
    assert [name for name, _ in log_targets(MPI, MPI_PODS, wanted)] == expected


def test_the_training_container_is_chosen_over_a_sidecar():
    pods = [v1_pod("mnist", "master", 0, sidecar=True)]
    assert log_targets(PYTORCH, pods, LEADER) == [("mnist-master-0", "pytorch")]


def test_a_pod_without_containers_is_read_without_naming_one():
    pod = v1_pod("mnist", "master", 0)
    pod["spec"] = {}
    assert log_targets(PYTORCH, [pod], ALL) == [("mnist-master-0", None)]


# -- validate_log_replicas --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [LEADER, ALL, NONE, ["worker-1"], ("master-0", "worker-0"), []])
def test_valid_log_replicas(value):
    validate_log_replicas(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("worker-1", "'worker-1' is not 'leader', 'all', 'none' or a list of replicas"),
        ("ALL", "'ALL' is not 'leader'"),
        (None, "expected 'leader', 'all', 'none' or a list of strings, got None"),
        (3, "got 3"),
        (["worker", 1], r"got \['worker', 1\]"),
        ({"worker-1"}, r"got \{'worker-1'\}"),
    ],
)
def test_invalid_log_replicas_are_rejected_with_the_allowed_values(value, message):
    with pytest.raises(ValueError, match=rf"^log_replicas: .*{message}"):
        validate_log_replicas(value)


# -- LogForwarder -----------------------------------------------------------------------------------


class RecordingLogger:
    def __init__(self) -> None:
        self.infos: list[str] = []
        self.warnings: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.infos.append(message % args)

    def warning(self, message: str, *args: object) -> None:
        self.warnings.append(message % args)


def log_hook(pods: Sequence[dict], logs: dict[str, str] | None = None) -> FakeTrainingJobHook:
    """The one fake of ``TrainingJobHook`` (tests/unit/fakes.py), listing ``pods`` under their job-name label
    and serving each pod's log as the kubelet does (CRI log files, one timestamp per line)."""
    hook = FakeTrainingJobHook()
    for pod in pods:
        hook.pods.setdefault(pod["metadata"]["labels"][JOB_NAME_LABEL], []).append(pod)
    for pod_name, text in (logs or {}).items():
        lines = text.split("\n")  # at newlines only, as the container runtime splits them
        hook.write_log(pod_name, *(lines[:-1] if lines[-1] == "" else lines))
    return hook


def set_pods(hook: FakeTrainingJobHook, pods: Sequence[dict]) -> None:
    hook.pods = {}
    for pod in pods:
        hook.pods.setdefault(pod["metadata"]["labels"][JOB_NAME_LABEL], []).append(pod)


def list_calls(hook: FakeTrainingJobHook) -> list[tuple[str, str]]:
    return [args for args, _ in hook.called("list_job_pods")]


def read_calls(hook: FakeTrainingJobHook) -> list[tuple[str, str, str | None]]:
    return [args for args, _ in hook.called("read_pod_log")]


def read_options(hook: FakeTrainingJobHook) -> list[dict]:
    return [options for _, options in hook.called("read_pod_log")]


T0 = LOG_START_NS


@pytest.fixture
def logger() -> RecordingLogger:
    return RecordingLogger()


def forwarder(hook: FakeTrainingJobHook, logger: RecordingLogger, log_replicas=LEADER) -> LogForwarder:
    return LogForwarder(hook, PYTORCH, "mnist", "kubeflow", log_replicas, logger)


def test_the_first_call_emits_the_whole_log_prefixed_with_the_pod(logger):
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "Using CUDA\nTrain Epoch: 1 [0/60000 (0%)]\tloss: 2.3000\n"})

    emitted = forwarder(hook, logger).forward()

    assert emitted == 2
    assert logger.infos == [
        "[mnist-master-0] Using CUDA",
        "[mnist-master-0] Train Epoch: 1 [0/60000 (0%)]\tloss: 2.3000",
    ]
    assert list_calls(hook) == [("mnist", "kubeflow")]
    assert read_calls(hook) == [("mnist-master-0", "kubeflow", "pytorch")]


def test_later_calls_emit_only_the_new_lines(logger):
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "line 1\nline 2\n"})
    logs = forwarder(hook, logger)
    logs.forward()

    hook.write_log("mnist-master-0", "line 3", "line 4")
    assert logs.forward() == 2
    assert logs.forward() == 0

    assert logger.infos == [f"[mnist-master-0] line {i}" for i in (1, 2, 3, 4)]


def test_each_pod_is_tracked_on_its_own(logger):
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "m1\n", "mnist-worker-0": "w1\nw2\n"})
    logs = forwarder(hook, logger, ALL)

    assert logs.forward() == 3
    hook.write_log("mnist-worker-1", "late starter")
    hook.write_log("mnist-master-0", "m2")
    assert logs.forward() == 2

    assert logger.infos == [
        "[mnist-master-0] m1",
        "[mnist-worker-0] w1",
        "[mnist-worker-0] w2",
        "[mnist-master-0] m2",
        "[mnist-worker-1] late starter",
    ]


def restarted(pods: Sequence[dict], pod_name: str, restarts: int) -> list[dict]:
    """``pods`` with ``pod_name``'s training container restarted ``restarts`` times by the kubelet."""
    result = copy.deepcopy(list(pods))
    for pod in result:
        if pod["metadata"]["name"] == pod_name:
            pod.setdefault("status", {})["containerStatuses"] = [{"name": "pytorch", "restartCount": restarts}]
    return result


def test_a_restarted_container_s_new_log_is_emitted_from_its_start(logger):
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "a\nb\nc\n"})
    logs = forwarder(hook, logger)
    logs.forward()

    hook.restart_container("mnist-master-0")
    hook.write_log("mnist-master-0", "fresh start")
    set_pods(hook, restarted(PYTORCH_PODS, "mnist-master-0", 1))
    assert logs.forward() == 1
    hook.write_log("mnist-master-0", "x", "y", "z")
    assert logs.forward() == 3

    assert logger.infos == [f"[mnist-master-0] {line}" for line in ("a", "b", "c", "fresh start", "x", "y", "z")]


def test_what_a_container_wrote_before_it_restarted_is_not_lost(logger):
    """Lines written between a poll and a crash are only in the previous container's log."""
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "epoch 1\n"})
    logs = forwarder(hook, logger)
    logs.forward()

    hook.write_log("mnist-master-0", "epoch 2", "Traceback (most recent call last):", "RuntimeError: NCCL timeout")
    hook.restart_container("mnist-master-0")
    hook.write_log("mnist-master-0", "resuming from checkpoint")
    set_pods(hook, restarted(PYTORCH_PODS, "mnist-master-0", 1))

    assert logs.forward() == 4
    assert logger.infos == [
        "[mnist-master-0] epoch 1",
        "[mnist-master-0] epoch 2",
        "[mnist-master-0] Traceback (most recent call last):",
        "[mnist-master-0] RuntimeError: NCCL timeout",
        "[mnist-master-0] resuming from checkpoint",
    ]


def test_a_log_longer_than_the_window_is_still_followed(logger):
    """The first read takes the last LOG_WINDOW_LINES lines; every line written after it comes."""
    window = logs_module.LOG_WINDOW_LINES
    hook = log_hook(PYTORCH_PODS)
    hook.write_log("mnist-master-0", *(f"old {i}" for i in range(window + 10)))
    logs = forwarder(hook, logger)
    assert logs.forward() == window

    hook.write_log("mnist-master-0", *(f"step {i}" for i in range(window + 50)))

    assert logs.forward() == window + 50
    assert logger.infos[-(window + 50) :] == [f"[mnist-master-0] step {i}" for i in range(window + 50)]


# -- what a window-matching cursor lost: repeated lines and bursts --------------------------------------------


def test_a_line_repeated_later_does_not_hide_what_came_between(logger):
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "start\nheartbeat\n"})
    logs = forwarder(hook, logger)
    logs.forward()
    hook.write_log("mnist-master-0", "heartbeat")
    logs.forward()  # one new line, the same text as an earlier one

    hook.write_log("mnist-master-0", "loss=0.31", "loss=0.29", "heartbeat")

    assert logs.forward() == 3
    assert logger.infos[-3:] == [
        "[mnist-master-0] loss=0.31",
        "[mnist-master-0] loss=0.29",
        "[mnist-master-0] heartbeat",
    ]


def test_a_window_ending_in_identical_lines_keeps_what_lies_between(logger):
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "go\n.\n.\n.\n"})
    logs = forwarder(hook, logger)
    logs.forward()

    hook.write_log("mnist-master-0", "checkpoint saved", ".", ".", ".")

    assert logs.forward() == 4
    assert logger.infos[-4:] == ["[mnist-master-0] checkpoint saved"] + ["[mnist-master-0] ."] * 3


def test_identical_lines_sharing_a_timestamp_across_polls_are_each_emitted_once(logger):
    """A burst written in one instant, read partly before a poll and partly after it."""
    hook = log_hook(PYTORCH_PODS)
    instant = T0 + 5 * 10**9
    hook.write_log("mnist-master-0", "rank 0 ready", "rank 1 ready", at=instant)
    logs = forwarder(hook, logger)
    assert logs.forward() == 2

    hook.write_log("mnist-master-0", "rank 1 ready", "rank 2 ready", at=instant)
    hook.write_log("mnist-master-0", "all ranks ready")

    assert logs.forward() == 3
    assert logger.infos == [
        "[mnist-master-0] rank 0 ready",
        "[mnist-master-0] rank 1 ready",
        "[mnist-master-0] rank 1 ready",
        "[mnist-master-0] rank 2 ready",
        "[mnist-master-0] all ranks ready",
    ]


def test_a_burst_bigger_than_one_read_is_caught_up_over_polls_without_a_gap(logger, monkeypatch):
    monkeypatch.setattr(logs_module, "LOG_READ_BYTES", 4096)
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "begin\n"})
    logs = forwarder(hook, logger)
    logs.forward()

    burst = [f"batch {i:05d} loss={1 / (i + 1):.6f}" for i in range(2000)]  # ~150 kB
    hook.write_log("mnist-master-0", *burst)
    for _ in range(200):
        if not logs.forward():
            break

    assert logger.infos == ["[mnist-master-0] begin"] + [f"[mnist-master-0] {line}" for line in burst]


def test_a_burst_within_one_second_bigger_than_one_read_still_advances(logger, monkeypatch):
    """``since_time`` has whole seconds: a read can return only lines already emitted; it reads more."""
    monkeypatch.setattr(logs_module, "LOG_READ_BYTES", 2048)
    hook = log_hook(PYTORCH_PODS)
    second = T0 + 7 * 10**9
    burst = [f"token {i:04d}" for i in range(1000)]
    for i, line in enumerate(burst):
        hook.write_log("mnist-master-0", line, at=second + i)
    logs = forwarder(hook, logger)
    for _ in range(100):
        if not logs.forward() and len(logger.infos) == len(burst):
            break

    assert logger.infos == [f"[mnist-master-0] {line}" for line in burst]


def test_pods_passed_in_are_used_without_listing(logger):
    hook = log_hook([], {"mnist-master-0": "hello\n"})

    assert forwarder(hook, logger).forward(PYTORCH_PODS) == 1
    assert list_calls(hook) == []


def test_none_reads_nothing(logger):
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "hello\n"})

    assert forwarder(hook, logger, NONE).forward() == 0
    assert list_calls(hook) == []
    assert read_calls(hook) == []
    assert logger.infos == []


def test_an_empty_log_emits_nothing(logger):
    hook = log_hook(PYTORCH_PODS, {})
    assert forwarder(hook, logger).forward() == 0
    assert logger.infos == []


def test_listing_pods_failing_is_logged_not_raised(logger):
    hook = log_hook(PYTORCH_PODS, {})
    hook.fail_list_pods = ConnectionError("connection refused")

    assert forwarder(hook, logger).forward() == 0

    assert logger.warnings == [
        "Could not read the logs of PyTorchJob mnist: ConnectionError('connection refused')",
    ]


def test_reading_a_log_failing_is_logged_not_raised_and_keeps_earlier_lines(logger):
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "m1\nm2\n"})
    hook.fail_read_log["mnist-worker-0"] = RuntimeError("(500) Internal Server Error")
    logs = forwarder(hook, logger, ALL)

    assert logs.forward() == 2
    assert logger.infos == ["[mnist-master-0] m1", "[mnist-master-0] m2"]
    assert len(logger.warnings) == 1
    assert "Internal Server Error" in logger.warnings[0]

    # Once the API recovers, nothing is repeated and the rest is caught up.
    hook.fail_read_log.clear()
    hook.write_log("mnist-worker-0", "w1")
    assert logs.forward() == 1
    assert logger.infos[-1] == "[mnist-worker-0] w1"


def test_a_logger_from_the_logging_module_works(caplog):
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": "epoch 1 done\n"})
    with caplog.at_level(logging.INFO, logger="disttrain.test"):
        LogForwarder(hook, PYTORCH, "mnist", "kubeflow", LEADER, logging.getLogger("disttrain.test")).forward()

    assert caplog.messages == ["[mnist-master-0] epoch 1 done"]


# -- what reaches the task log: printable text, lines split at newlines only ---------------------------


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b[31mred\x1b[0m and \x1b[1;32mbold green\x1b[m", "red and bold green"),
        ("title\x1b]0;owned\x07 after", "title after"),
        ("bell\x07 nul\x00 del\x7f c1\x9b csi\x85", "bell nul del c1 csi"),
        ("keeps\ttabs", "keeps\ttabs"),
        (" 10%|#         |\r 50%|#####     |\r100%|##########|", "100%|##########|"),
        ("done\r", "done"),
    ],
    ids=["ansi-colours", "osc-title", "c0-c1", "tab", "progress-bar", "trailing-cr"],
)
def test_printable_shows_what_a_terminal_would_without_its_controls(raw: str, shown: str) -> None:
    assert logs_module.printable(raw) == shown


def test_printable_cuts_a_line_too_long_for_the_task_log() -> None:
    shown = logs_module.printable("é" * 10_000)  # 20,000 bytes

    assert shown.startswith("é" * (logs_module.MAX_LINE_BYTES // 2))
    assert shown.endswith(f" [{20_000 - logs_module.MAX_LINE_BYTES} bytes cut]")


def test_a_progress_bar_and_terminal_codes_reach_the_task_log_once_and_clean(logger):
    bar = "".join(f"\r\x1b[32m{percent:3d}%\x1b[0m" for percent in range(0, 101, 10))
    hook = log_hook(PYTORCH_PODS, {"mnist-master-0": f"start\n{bar}\n"})
    logs = forwarder(hook, logger)

    logs.forward()
    hook.write_log("mnist-master-0", "end")
    logs.forward()

    assert logger.infos == ["[mnist-master-0] start", "[mnist-master-0] 100%", "[mnist-master-0] end"]
