"""The operators' grouped parameters as typed values, and the checks every parameter goes through.

A DAG author writes the common case flat (``image``, ``command``, ``num_workers``,
``gpus_per_replica``) and what belongs together as one value: ``run_policy=RunPolicy(...)``,
``pod_options=PodOptions(...)``, ``wait_policy=WaitPolicy(...)``, ``cleanup_policy=CleanupPolicy(...)``,
and a kind's own ``spec`` fields: ``pytorch_options=PyTorchOptions(...)``, ``mpi_options=MPIOptions(...)``.
Each value checks itself when it is made, so a typo fails when the DAG file is parsed, with the
field's full name (``wait_policy.startup_timeout``) in the error. The validators are public: the
operators, the sensor and the decorators check their flat parameters with the same functions.

Pure and light: nothing here imports Airflow or a Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.job.progress import DEFAULT_PROGRESS_INTERVAL_SECONDS
from airflow_provider_disttrain.kube.quantities import validate_size_limit

IF_EXISTS_CHOICES = ("reattach", "fail", "replace")
DELETE_ON_FINISH_CHOICES = ("never", "succeeded", "always")
NPROC_PER_NODE_WORDS = ("auto", "cpu", "gpu")
DEFAULT_API_FAILURE_TOLERANCE_SECONDS = 900.0
"""15 minutes: a managed cluster's control-plane upgrade (a zonal one has no API server for minutes)."""


# -- validators ------------------------------------------------------------------------------------


def positive_seconds(value: timedelta | float | None, field: str) -> float | None:
    """``value`` (seconds or a timedelta) as seconds; None stays None; refuses anything but a positive number."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(f"{field}: expected a positive number of seconds or a timedelta, got {value!r}")
    return float(seconds)


def choice(value: str, choices: Sequence[str], field: str) -> str:
    """``value`` if it is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{field}: {value!r} is not one of {', '.join(choices)}")
    return value


def optional_choice(value: str | None, choices: Sequence[str], field: str) -> str | None:
    return None if value is None else choice(value, choices, field)


def integer_at_least(value: int | None, field: str, minimum: int = 1, maximum: int | None = None) -> int | None:
    """``value`` if it is an integer (not a bool) from ``minimum`` to ``maximum``; None stays None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidJobSpecError(field, f"expected an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidJobSpecError(field, f"expected an integer <= {maximum}, got {value!r}")
    return value


def nproc_per_node(value: int | str | None, field: str = "nproc_per_node") -> int | str | None:
    """A PyTorchJob's ``spec.nprocPerNode``: a positive integer (or its digits), ``auto``, ``cpu`` or ``gpu``."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if value in NPROC_PER_NODE_WORDS or (isinstance(value, str) and value.isdigit() and int(value) > 0):
        return value
    raise ValueError(f"{field}: expected a positive integer, 'auto', 'cpu' or 'gpu', got {value!r}")


def require_type(value: object, expected: type, field: str) -> None:
    """Refuse a grouped parameter given as something else (a dict where a ``RunPolicy`` is expected)."""
    if value is not None and not isinstance(value, expected):
        raise TypeError(f"{field}: expected a {expected.__name__}, got {type(value).__name__} {value!r}")


def check_ttl_leaves_time_to_wait(manifest: Mapping[str, Any], poll_interval: float, field: str) -> None:
    """Refuse a ``ttlSecondsAfterFinished`` that a wait reading the job every ``poll_interval`` could miss.

    The Kubeflow operator deletes a finished job that many seconds after it finished: read less often,
    the job can vanish before the wait sees how it ended, and a success would read as a deletion.
    Two poll intervals leave room for a slow read.
    """
    ttl = ((manifest.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
    if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl < 2 * poll_interval:
        raise InvalidJobSpecError(
            field,
            f"{ttl}s lets the Kubeflow operator delete the finished job before a wait that reads it every "
            f"poll_interval ({poll_interval:g}s) sees how it ended; use at least {2 * poll_interval:g}s, a "
            "shorter wait_policy.poll_interval, or cleanup_policy.on_finish to delete the job once the task "
            "has its result",
        )


# -- grouped values --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunPolicy:
    """``spec.runPolicy`` of a job with replica specs (the same names for the training-operator and the
    mpi-operator). ``None`` leaves the manifest's (or the Kubeflow operator's) value.

    :param clean_pod_policy: which pods to delete when the job finishes: ``All``, ``Running`` or ``None``.
    :param ttl_seconds_after_finished: the Kubeflow operator deletes the finished job this many seconds later.
    :param active_deadline_seconds: the Kubeflow operator fails the job after this many seconds.
    :param backoff_limit: how many times the job's pods may fail before the job fails.
    :param suspend: submit the job suspended.
    :param scheduling_queue: ``schedulingPolicy.queue``, the gang scheduler's queue (Volcano,
        scheduler-plugins); Kueue's queue is the operators' ``local_queue``.
    :param priority_class: ``schedulingPolicy.priorityClass``.
    :param min_available: ``schedulingPolicy.minAvailable``.
    """

    clean_pod_policy: str | None = None
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    suspend: bool | None = None
    scheduling_queue: str | None = None
    priority_class: str | None = None
    min_available: int | None = None

    def __post_init__(self) -> None:
        integer_at_least(self.ttl_seconds_after_finished, "run_policy.ttl_seconds_after_finished", minimum=0)
        integer_at_least(self.active_deadline_seconds, "run_policy.active_deadline_seconds")
        integer_at_least(self.backoff_limit, "run_policy.backoff_limit", minimum=0)
        integer_at_least(self.min_available, "run_policy.min_available")

    def to_spec(self) -> dict[str, Any]:
        scheduling = _drop_none(
            {"queue": self.scheduling_queue, "priorityClass": self.priority_class, "minAvailable": self.min_available}
        )
        return _drop_none(
            {
                "cleanPodPolicy": self.clean_pod_policy,
                "ttlSecondsAfterFinished": self.ttl_seconds_after_finished,
                "activeDeadlineSeconds": self.active_deadline_seconds,
                "backoffLimit": self.backoff_limit,
                "suspend": self.suspend,
                "schedulingPolicy": scheduling or None,
            }
        )


@dataclass(frozen=True)
class PodOptions:
    """What goes into every replica's pod template besides the container's image, command and resources.

    :param node_selector: pod node selector.
    :param tolerations: pod tolerations.
    :param volumes: pod volumes (merged by name with the manifest's).
    :param volume_mounts: the main container's volume mounts (merged by name).
    :param service_account_name: the pods' service account.
    :param image_pull_secrets: names of image pull secrets.
    :param shm_size: size of a memory-backed ``/dev/shm`` (e.g. ``"8Gi"``), which PyTorch data loaders need.
    """

    node_selector: Mapping[str, str] | None = None
    tolerations: Sequence[Mapping[str, Any]] | None = None
    volumes: Sequence[Mapping[str, Any]] | None = None
    volume_mounts: Sequence[Mapping[str, Any]] | None = None
    service_account_name: str | None = None
    image_pull_secrets: Sequence[str] | None = None
    shm_size: str | None = None

    def __post_init__(self) -> None:
        if self.shm_size is not None:
            validate_size_limit(self.shm_size, "pod_options.shm_size")


@dataclass(frozen=True)
class WaitPolicy:
    """How long the task waits for its job, and how often it looks.

    :param poll_interval: seconds between status reads (sync mode, and the trigger's fallback polling).
    :param startup_timeout: how long the job may take to first run (queued, pods Pending, or held
        suspended) before the task fails; a job suspended after it ran is waited for, within the
        task's ``execution_timeout``. For a job Kueue holds, the clock starts when Kueue admits it.
    :param queue_timeout: how long a job in a Kueue ``local_queue`` may wait for its first admission
        (default: no limit); past it the task fails with Kueue's reason and the job is deleted.
    :param progress_interval: after a burst of three, at most one progress line per this many seconds in
        a deferred task's log (default 30 s); changes in between are coalesced into the next line, and
        the job's end, or its loss of Kueue's admission, is always written at once.
    :param api_failure_tolerance: how long the wait rides out an API server it cannot reach (refused,
        reset, timed out, 429, 5xx) in either mode (default 15 minutes: a control-plane upgrade). Past
        it the task fails as "lost contact", and the job, last seen healthy, is not deleted.
    """

    poll_interval: timedelta | float = 10.0
    startup_timeout: timedelta | float | None = timedelta(hours=1)
    queue_timeout: timedelta | float | None = None
    progress_interval: timedelta | float = DEFAULT_PROGRESS_INTERVAL_SECONDS
    api_failure_tolerance: timedelta | float = DEFAULT_API_FAILURE_TOLERANCE_SECONDS

    def __post_init__(self) -> None:
        positive_seconds(self.poll_interval, "wait_policy.poll_interval")
        positive_seconds(self.startup_timeout, "wait_policy.startup_timeout")
        positive_seconds(self.queue_timeout, "wait_policy.queue_timeout")
        positive_seconds(self.progress_interval, "wait_policy.progress_interval")
        positive_seconds(self.api_failure_tolerance, "wait_policy.api_failure_tolerance")

    @property
    def poll_seconds(self) -> float:
        return positive_seconds(self.poll_interval, "wait_policy.poll_interval") or 10.0

    @property
    def startup_seconds(self) -> float | None:
        return positive_seconds(self.startup_timeout, "wait_policy.startup_timeout")

    @property
    def queue_seconds(self) -> float | None:
        return positive_seconds(self.queue_timeout, "wait_policy.queue_timeout")

    @property
    def progress_seconds(self) -> float:
        seconds = positive_seconds(self.progress_interval, "wait_policy.progress_interval")
        return DEFAULT_PROGRESS_INTERVAL_SECONDS if seconds is None else seconds

    @property
    def api_failure_tolerance_seconds(self) -> float:
        seconds = positive_seconds(self.api_failure_tolerance, "wait_policy.api_failure_tolerance")
        return DEFAULT_API_FAILURE_TOLERANCE_SECONDS if seconds is None else seconds


@dataclass(frozen=True)
class CleanupPolicy:
    """When the task deletes its job.

    :param on_finish: ``never`` (default), ``succeeded`` or ``always``: delete the job once it finished.
    :param on_timeout: delete the job when a timeout fails the task (a job Kueue still queues is
        deleted whatever this says: left in the queue it would take quota for a failed task).
    :param on_kill: delete the job when the task is killed (marked failed, cleared).
    """

    on_finish: str = "never"
    on_timeout: bool = True
    on_kill: bool = True

    def __post_init__(self) -> None:
        choice(self.on_finish, DELETE_ON_FINISH_CHOICES, "cleanup_policy.on_finish")

    def deletes_after(self, succeeded: bool) -> bool:
        """Whether a job that finished (``succeeded`` or failed) is deleted once the task has its result."""
        return self.on_finish == "always" or (succeeded and self.on_finish == "succeeded")


# A PyTorchJob's ``spec.elasticPolicy`` keys, snake_case to the CRD's camelCase.
_ELASTIC_KEYS = {
    "min_replicas": "minReplicas",
    "max_replicas": "maxReplicas",
    "rdzv_backend": "rdzvBackend",
    "rdzv_port": "rdzvPort",
    "rdzv_host": "rdzvHost",
    "rdzv_id": "rdzvId",
    "rdzv_conf": "rdzvConf",
    "standalone": "standalone",
    "max_restarts": "maxRestarts",
    "metrics": "metrics",
}


def elastic_policy_spec(policy: Mapping[str, Any], field: str = "pytorch_options.elastic_policy") -> dict[str, Any]:
    """``spec.elasticPolicy`` from snake_case (``min_replicas``) or the CRD's camelCase keys."""
    known = set(_ELASTIC_KEYS) | set(_ELASTIC_KEYS.values())
    unknown = sorted(set(policy) - known)
    if unknown:
        raise ValueError(f"{field}: unknown keys {unknown}; expected some of {sorted(_ELASTIC_KEYS)}")
    return {_ELASTIC_KEYS.get(key, key): value for key, value in policy.items()}


@dataclass(frozen=True)
class PyTorchOptions:
    """A PyTorchJob's own ``spec`` fields and replica layout (``PyTorchJobOperator(pytorch_options=...)``).

    :param nproc_per_node: processes per pod (``spec.nprocPerNode``): an integer, ``auto``, ``cpu`` or ``gpu``.
    :param elastic_policy: ``spec.elasticPolicy`` as a mapping, e.g. ``{"min_replicas": 2,
        "max_replicas": 8, "rdzv_backend": "c10d", "max_restarts": 3}``; workers can then be scaled with
        ``ScaleTrainingJobOperator`` within [min, max]. The containers of an elastic job with the c10d
        rendezvous (from this field or ``job_manifest``) get ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
        unless their ``env`` names it: with torch >= 2.4, a worker joining later would stall the group.
    :param with_master: give a job built from parameters a Master replica; default: yes, unless the job
        is elastic (torchrun's rendezvous replaces the Master there). A ``job_manifest`` keeps its own
        replicas by default; ``True`` builds a Master from the parameters beside a manifest without one.
    """

    nproc_per_node: int | str | None = None
    elastic_policy: Mapping[str, Any] | None = None
    with_master: bool | None = None

    def __post_init__(self) -> None:
        nproc_per_node(self.nproc_per_node, "pytorch_options.nproc_per_node")
        if self.elastic_policy is not None:
            elastic_policy_spec(self.elastic_policy)  # unknown keys fail when the DAG is parsed

    def to_spec(self) -> dict[str, Any]:
        """The ``spec`` fields these options set (deep-merged into the job's spec)."""
        fields: dict[str, Any] = {}
        if self.nproc_per_node is not None:
            fields["nprocPerNode"] = str(self.nproc_per_node)
        if self.elastic_policy is not None:
            fields["elasticPolicy"] = elastic_policy_spec(self.elastic_policy)
        return fields


# The kinds table's allowed values, checked under the fields' names when the DAG is parsed.
_MPI_CHOICES = dict(get_job_kind("MPIJob").spec_choices)
MPI_IMPLEMENTATIONS = tuple(sorted(_MPI_CHOICES["mpiImplementation"]))
LAUNCHER_CREATION_POLICIES = tuple(sorted(_MPI_CHOICES["launcherCreationPolicy"]))


@dataclass(frozen=True)
class MPIOptions:
    """An MPIJob's own ``spec`` fields (``MPIJobOperator(mpi_options=...)``).

    :param slots_per_worker: MPI slots per worker (usually GPUs per worker).
    :param mpi_implementation: ``OpenMPI``, ``Intel`` or ``MPICH``.
    :param launcher_creation_policy: ``AtStartup`` or ``WaitForWorkersReady``.
    :param run_launcher_as_worker: also run an MPI rank in the launcher pod.
    """

    slots_per_worker: int | None = None
    mpi_implementation: str | None = None
    launcher_creation_policy: str | None = None
    run_launcher_as_worker: bool | None = None

    def __post_init__(self) -> None:
        integer_at_least(self.slots_per_worker, "mpi_options.slots_per_worker")
        optional_choice(self.mpi_implementation, MPI_IMPLEMENTATIONS, "mpi_options.mpi_implementation")
        optional_choice(
            self.launcher_creation_policy, LAUNCHER_CREATION_POLICIES, "mpi_options.launcher_creation_policy"
        )

    def to_spec(self) -> dict[str, Any]:
        """The ``spec`` fields these options set (deep-merged into the job's spec)."""
        return _drop_none(
            {
                "slotsPerWorker": self.slots_per_worker,
                "mpiImplementation": self.mpi_implementation,
                "launcherCreationPolicy": self.launcher_creation_policy,
                "runLauncherAsWorker": self.run_launcher_as_worker,
            }
        )


def refuse_flat_fields(operator: str, parameter: str, group: type, given: Mapping[str, Any]) -> None:
    """Refuse a flat keyword that is a field of the grouped value ``parameter`` (issue 27 moved the kinds'
    own fields into ``PyTorchOptions``/``MPIOptions``), naming where it went.

    Without this, Airflow's own refusal of an unknown keyword would not say where the parameter went.
    """
    stale = [name for name in given if name in getattr(group, "__dataclass_fields__", {})]
    if stale:
        where = "; ".join(f"{name} is now {parameter}={group.__name__}({name}=...)" for name in stale)
        raise TypeError(f"{operator}: {', '.join(stale)}: moved into a grouped parameter ({where})")


def _drop_none(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if value is not None}
