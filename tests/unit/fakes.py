"""Fakes at the provider's I/O boundaries, and builders for the objects they return.

* ``FakeTrainingJobHook``: an in-memory stand-in for ``TrainingJobHook``'s public methods, for the
  operator, sensor and DAG-run tests. Jobs live in a dict; each ``get_job`` moves a job one step along
  the status progression the test scripted, the way the training-operator would between two polls;
  given the test's clock (``clock``, ``step_seconds``) the job moves on with time instead, so a story
  does not depend on how many reads the code makes.
  It is the only fake of that hook (pods and their logs included); ``tests/unit/test_fakes.py`` checks
  that its methods take the real hook's parameters.
* ``InMemoryWatches``: the trigger's shared watch over the same in-memory jobs (the watch itself is
  tested against ``tests/unit/fake_apiserver.py``, a small API server speaking HTTP on loopback).
* ``FakeTI`` and ``FakeStateStore``: the parts of the task context the operators read.

Statuses and jobs are plain dicts shaped like the API server's JSON, with fresh copies on every call.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import logging
import math
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_provider_disttrain.exceptions import JobAlreadyExistsError
from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
from airflow_provider_disttrain.job.kinds import JOB_NAME_LABEL, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL, get_job_kind
from airflow_provider_disttrain.kube.connection import ClusterConnection
from airflow_provider_disttrain.utils import clock

LOG = logging.getLogger(__name__)

# -- statuses ------------------------------------------------------------------------------------------

START = "2024-05-01T10:00:00Z"
RUNNING_AT = "2024-05-01T10:00:05Z"
END = "2024-05-01T10:10:05Z"


def condition(type_: str, at: str, reason: str = "", message: str = "", status: str = "True") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason or f"Job{type_}",
        "message": message or f"job is {type_.lower()}",
        "lastTransitionTime": at,
        "lastUpdateTime": at,
    }


def queued_status() -> dict[str, Any]:
    return {"conditions": [condition("Created", START)]}


def suspended_status() -> dict[str, Any]:
    return {"conditions": [condition("Created", START), condition("Suspended", RUNNING_AT)]}


def running_status(workers: int = 1, leader: str = "Master") -> dict[str, Any]:
    return {
        "conditions": [condition("Created", START), condition("Running", RUNNING_AT)],
        "startTime": RUNNING_AT,
        "replicaStatuses": {leader: {"active": 1}, "Worker": {"active": workers}},
    }


def succeeded_status(workers: int = 1, leader: str = "Master") -> dict[str, Any]:
    return {
        "conditions": [
            condition("Created", START),
            condition("Running", RUNNING_AT, status="False"),
            condition("Succeeded", END),
        ],
        "startTime": RUNNING_AT,
        "completionTime": END,
        "replicaStatuses": {leader: {"succeeded": 1}, "Worker": {"succeeded": workers}},
    }


FAILED_REASON = "BackoffLimitExceeded"
FAILED_MESSAGE = "PyTorchJob train-abc has failed because it has reached the specified backoff limit"


def failed_status(reason: str = FAILED_REASON, message: str = FAILED_MESSAGE, leader: str = "Master") -> dict[str, Any]:
    return {
        "conditions": [
            condition("Created", START),
            condition("Running", RUNNING_AT, status="False"),
            condition("Failed", END, reason=reason, message=message),
        ],
        "startTime": RUNNING_AT,
        "completionTime": END,
        "replicaStatuses": {leader: {"failed": 1}, "Worker": {"active": 0}},
    }


def now_timestamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_job(
    name: str = "train-abc",
    namespace: str = "default",
    kind: str = "PyTorchJob",
    *,
    uid: str = "uid-1",
    status: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    created: str | None = None,
    resource_version: str = "100",
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A job object as the API server returns it."""
    job_kind = get_job_kind(kind)
    return {
        "apiVersion": job_kind.resource.api_version,
        "kind": job_kind.kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": resource_version,
            "creationTimestamp": created or now_timestamp(),
            "labels": dict(labels or {}),
        },
        "spec": copy.deepcopy(dict(spec)) if spec else {job_kind.replica_specs_key: {"Worker": {"replicas": 1}}},
        "status": copy.deepcopy(dict(status or {})),
    }


# -- pods and events -----------------------------------------------------------------------------------


def make_pod(
    job_name: str,
    replica: str = "master",
    index: int = 0,
    *,
    namespace: str = "default",
    phase: str = "Running",
    container: str = "pytorch",
    terminated: Mapping[str, Any] | None = None,
    replica_label: str = REPLICA_TYPE_LABEL,
) -> dict[str, Any]:
    """A training pod; ``terminated`` is the container's terminated state (e.g. OOMKilled)."""
    name = f"{job_name}-{replica}-{index}" if replica != "launcher" else f"{job_name}-launcher-x1"
    state: dict[str, Any] = {"terminated": dict(terminated)} if terminated else {"running": {"startedAt": START}}
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {JOB_NAME_LABEL: job_name, replica_label: replica, REPLICA_INDEX_LABEL: str(index)},
        },
        "spec": {"containers": [{"name": container, "image": "busybox"}]},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": container, "ready": not terminated, "restartCount": 0, "state": state}],
        },
    }


LOG_START = "2024-05-01T10:00:01"  # the second every fake log line was written in
LOG_START_NS = int(datetime.fromisoformat(f"{LOG_START}+00:00").timestamp()) * 10**9


def log_stamp(nanoseconds: int) -> str:
    """RFC 3339 with nine fraction digits, as the kubelet writes ``timestamps=true``."""
    seconds, fraction = divmod(nanoseconds, 10**9)
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:09d}Z"


def _log_lines(text: str) -> list[str]:
    """Lines as the container runtime splits them: at newlines only (a ``\\r`` stays in its line)."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


OOM_KILLED = {"reason": "OOMKilled", "exitCode": 137, "startedAt": RUNNING_AT, "finishedAt": END}


def make_event(involved: str, reason: str, message: str, at: str = END) -> dict[str, Any]:
    return {
        "type": "Warning",
        "reason": reason,
        "message": message,
        "involvedObject": {"name": involved, "kind": "Pod"},
        "lastTimestamp": at,
    }


def active_queue(kind: str, name: str, namespace: str | None = None, cluster_queue: str = "cluster-queue") -> dict:
    """A Kueue LocalQueue or ClusterQueue as Kueue leaves one that admits workloads."""
    metadata: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    queue: dict[str, Any] = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": metadata, "spec": {}}
    if kind == "LocalQueue":
        queue["spec"]["clusterQueue"] = cluster_queue
    queue["status"] = {"conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit"}]}
    return queue


# -- the sync hook ---------------------------------------------------------------------------------------

_API_METHODS = (
    "create_job",
    "get_job",
    "find_jobs",
    "find_workload",
    "list_workloads",
    "pending_workloads",
    "get_kueue_queue",
    "patch_job",
    "delete_job",
    "list_job_pods",
    "get_training_runtime",
    "read_pod_log",
    "list_warning_events",
)


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386), as the API server applies it."""
    for key, value in patch.items():
        if value is None:
            base.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


class FakeTrainingJobHook:
    """``TrainingJobHook``'s public methods over an in-memory store of jobs.

    :param progression: statuses every job created through ``create_job`` goes through, one step per
        ``get_job``; the last one stays.
    :param clock: with ``step_seconds``, the job moves on with the test's clock instead of per read (a
        ``ManualClock``, or anything with ``wall()``): it shows step ``n`` of its progression from
        ``n * step_seconds`` after it was created (or added) until the next, however often it is read. A
        test whose story is "held for a while, then runs" then does not depend on how many reads the
        code makes in between.

    Pods are listed from ``pods`` (job name -> pods, selected by the kind's job-name label as the real
    hook's selector does). Logs are served the way the kubelet serves its CRI log files: every line has
    the time it was written, ``tail_lines``, then ``since_time`` (whole seconds) apply, ``timestamps``
    prefixes RFC 3339 stamps and ``limit_bytes`` cuts the answer, possibly mid-line. Give a pod's log as
    text in ``logs`` (and its restarted container's last run in ``previous_logs``), every line written
    within ``LOG_START``'s second, or write it line by line with ``write_log``/``restart_container``.
    :param namespace: what ``default_namespace()`` answers (the connection's namespace).
    :param connection: what ``trigger_connection()`` answers.
    """

    def __init__(
        self,
        progression: Iterable[Mapping[str, Any]] = (),
        *,
        namespace: str = "default",
        connection: ClusterConnection | None = None,
        clock: Any = None,
        step_seconds: float | None = None,
    ) -> None:
        if (clock is None) != (step_seconds is None):
            raise ValueError("clock and step_seconds come together")
        self.progression = [dict(step) for step in progression]
        self.clock, self.step_seconds = clock, step_seconds
        self.born: dict[tuple[str, str], float] = {}  # with a clock: when each job's progression began
        self.namespace = namespace
        self.connection = connection or ClusterConnection(conn_id="kubernetes_default")
        self.conn_id = self.connection.conn_id
        self.worker_clusters_value: Any = None  # the connection's extra ``worker_clusters``
        self.worker_hooks: dict[str, FakeTrainingJobHook] = {}  # MultiKueue worker clusters' by connection id
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.steps: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.pods: dict[str, list[dict[str, Any]]] = {}
        self.logs: dict[str, str] = {}
        self.previous_logs: dict[str, str] = {}  # the log of a restarted container's last run
        # Logs written with write_log: pod -> one log per container run, each line with its time (ns).
        self.log_runs: dict[str, list[list[tuple[int, str]]]] = {}
        self.log_clock = LOG_START_NS
        self.events: list[dict[str, Any]] = []
        # TrainJob runtimes by (kind, name, namespace; "" for a cluster-wide ClusterTrainingRuntime).
        self.runtimes: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.workloads: list[dict[str, Any]] = []  # Kueue Workloads, found by their job-uid label
        self.visibility_error: Exception | None = None  # what Kueue's visibility API answers instead
        # Kueue's LocalQueues ("localqueues", namespace, name) and ClusterQueues ("clusterqueues", None, name):
        # a dict is the object, None a queue that does not exist, an exception is raised. Any other queue
        # exists and is Active (an active LocalQueue of the ClusterQueue "cluster-queue").
        self.kueue_queues: dict[tuple[str, str | None, str], Any] = {}
        self.log = LOG
        # Test controls.
        self.before_create: Any = None  # called once with the manifest, just before the next create
        self.conflict_after_store = False  # the next create stores the job, then answers 409 (lost reply)
        self.delete_removes = True  # False: deleted jobs linger (finalizers) until forget()
        self.on_get: Any = None  # called with the get's number before each get_job
        self.fail_list_pods: Exception | None = None  # raised by list_job_pods
        self.fail_read_log: dict[str, Exception] = {}  # pod -> raised by read_pod_log
        self._uids = itertools.count(1)
        self._versions = itertools.count(1000)

    # -- test helpers ---------------------------------------------------------------------------

    def add_job(self, job: Mapping[str, Any], progression: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
        stored = copy.deepcopy(dict(job))
        key = (stored["metadata"]["namespace"], stored["metadata"]["name"])
        self.jobs[key] = stored
        self.steps[key] = [dict(step) for step in progression]
        if self.clock is not None:
            self.born[key] = self.clock.wall()
        return stored

    def job(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.jobs.get((namespace, name))

    def only_job(self) -> dict[str, Any]:
        assert len(self.jobs) == 1, f"expected one job, found {sorted(self.jobs)}"
        return next(iter(self.jobs.values()))

    def called(self, method: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(args, kwargs) for name, args, kwargs in self.calls if name == method]

    def submitted_manifest(self) -> dict[str, Any]:
        """The manifest of the one job created."""
        [(args, _)] = self.called("create_job")
        return args[1]

    def api_calls(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def forget(self, name: str, namespace: str = "default") -> None:
        self.jobs.pop((namespace, name), None)

    def write_log(self, pod: str, *lines: str, at: int | None = None) -> None:
        """Append lines to the pod's log; each gets its own time (1 µs apart) unless ``at`` (ns) stamps them
        all alike (a burst)."""
        runs = self.log_runs.setdefault(pod, self._text_log_runs(pod))
        self.log_clock = max([self.log_clock, *(at for run in runs for at, _ in run)])  # after the text's lines
        for line in lines:
            self.log_clock = at if at is not None else self.log_clock + 1_000
            runs[-1].append((self.log_clock, line))

    def restart_container(self, pod: str) -> None:
        """The pod's container restarts: a new log begins, the last one is what ``previous`` reads."""
        self.log_runs.setdefault(pod, self._text_log_runs(pod)).append([])

    def _text_log_runs(self, pod: str) -> list[list[tuple[int, str]]]:
        """``previous_logs`` and ``logs`` as runs, line ``i`` written at ``LOG_START`` + ``i`` µs."""
        texts = ([self.previous_logs[pod]] if pod in self.previous_logs else []) + [self.logs.get(pod, "")]
        return [[(LOG_START_NS + index * 1_000, line) for index, line in enumerate(_log_lines(t))] for t in texts]

    def _record(self, method: str, *args: Any, **kwargs: Any) -> None:
        assert method in _API_METHODS
        self.calls.append((method, args, kwargs))

    # -- TrainingJobHook's interface ------------------------------------------------------------

    def default_namespace(self) -> str:
        return self.namespace

    def trigger_connection(self) -> ClusterConnection:
        return self.connection

    def create_job(self, kind: Any, manifest: Mapping[str, Any], namespace: str, *, dry_run: bool = False) -> Any:
        self._record("create_job", kind, copy.deepcopy(dict(manifest)), namespace, dry_run=dry_run)
        if self.before_create is not None:
            callback, self.before_create = self.before_create, None
            callback(copy.deepcopy(dict(manifest)))
        job_kind = get_job_kind(kind)
        name = manifest["metadata"]["name"]
        if (namespace, name) in self.jobs:
            raise JobAlreadyExistsError(f"{job_kind.kind} {namespace}/{name} already exists")
        job = copy.deepcopy(dict(manifest))
        job["metadata"].update(
            uid=f"uid-created-{next(self._uids)}",
            creationTimestamp=now_timestamp(),
            resourceVersion=str(next(self._versions)),
            namespace=namespace,
        )
        if dry_run:
            return job
        self.jobs[(namespace, name)] = job
        self.steps[(namespace, name)] = [dict(step) for step in self.progression]
        if self.clock is not None:
            self.born[(namespace, name)] = self.clock.wall()
        if self.conflict_after_store:
            self.conflict_after_store = False
            raise JobAlreadyExistsError(f"{job_kind.kind} {namespace}/{name} already exists")
        return copy.deepcopy(job)

    def get_job(self, kind: Any, name: str, namespace: str) -> dict[str, Any] | None:
        self._record("get_job", kind, name, namespace)
        if self.on_get is not None:
            self.on_get(len(self.called("get_job")))
        key = (namespace, name)
        job = self.jobs.get(key)
        if job is None:
            return None
        if self.clock is not None:
            if (status := self._status_on_the_clock(key)) is not None and status != job.get("status"):
                job["status"] = copy.deepcopy(status)
                job["metadata"]["resourceVersion"] = str(next(self._versions))
        elif steps := self.steps.get(key):
            job["status"] = copy.deepcopy(steps.pop(0))
            job["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(job)

    def _status_on_the_clock(self, key: tuple[str, str]) -> dict[str, Any] | None:
        """The step of the job's progression its age on ``clock`` has reached (None without one)."""
        steps = self.steps.get(key)
        if not steps or self.step_seconds is None:
            return None
        elapsed = self.clock.wall() - self.born.get(key, self.clock.wall())
        # A hair of slack: a ManualClock near 1.7e9 epoch seconds adds 0.02 s with rounding error.
        reached = math.floor(elapsed / self.step_seconds + 1e-3)
        return steps[max(0, min(reached, len(steps) - 1))]

    def find_jobs(self, kind: Any, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
        self._record("find_jobs", kind, namespace, dict(labels))
        job_kind = get_job_kind(kind)
        found = [
            copy.deepcopy(job)
            for (job_namespace, _), job in self.jobs.items()
            if job_namespace == namespace
            and job.get("kind") == job_kind.kind
            and all((job["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())
        ]
        return sorted(found, key=lambda job: job["metadata"].get("creationTimestamp") or "")

    def patch_job(self, kind: Any, name: str, namespace: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        self._record("patch_job", kind, name, namespace, copy.deepcopy(dict(patch)))
        job = self.jobs[(namespace, name)]
        _merge(job, patch)
        return copy.deepcopy(job)

    def delete_job(
        self,
        kind: Any,
        name: str,
        namespace: str,
        *,
        uid: str | None = None,
        propagation_policy: str = "Background",
    ) -> bool:
        self._record("delete_job", kind, name, namespace, uid=uid)
        job = self.jobs.get((namespace, name))
        if job is None or (uid and job["metadata"].get("uid") != uid):
            return False
        if self.delete_removes:
            del self.jobs[(namespace, name)]
        return True

    def find_workload(self, namespace: str, job_uid: str) -> dict[str, Any] | None:
        """The job's Workload among ``workloads``, picked as the real hook picks from its label-selected list."""
        from airflow_provider_disttrain.kueue.hold import workload_of

        self._record("find_workload", namespace, job_uid)
        listed = [w for w in self.workloads if w["metadata"].get("namespace") == namespace]
        workload = workload_of(listed, job_uid)
        return copy.deepcopy(dict(workload)) if workload is not None else None

    def list_workloads(self, namespace: str, max_pages: int = 2) -> list[dict[str, Any]]:
        """The namespace's Workloads, as the real hook lists them for the admission history."""
        self._record("list_workloads", namespace)
        return [copy.deepcopy(w) for w in self.workloads if w["metadata"].get("namespace") == namespace]

    def pending_workloads(self, namespace: str, local_queue: str) -> dict[str, Any]:
        """Kueue's visibility answer (``fake_apiserver.pending_workloads_summary``) over the namespace's
        Workloads (``visibility_error``, when set, is raised instead)."""
        from tests.unit.fake_apiserver import pending_workloads_summary

        self._record("pending_workloads", namespace, local_queue)
        if self.visibility_error is not None:
            raise self.visibility_error
        candidates = [w for w in self.workloads if w["metadata"].get("namespace") == namespace]
        return pending_workloads_summary(candidates, namespace, local_queue)

    def get_kueue_queue(self, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        self._record("get_kueue_queue", resource.kind, name, namespace)
        key = (resource.plural, namespace, name)
        if key not in self.kueue_queues:
            return active_queue(resource.kind, name, namespace)
        found = self.kueue_queues[key]
        if isinstance(found, BaseException):
            raise found
        return copy.deepcopy(found)

    # The real loop (``delete_job``, then ``get_job`` until gone) over the calls above, with its own signature.
    delete_and_wait = TrainingJobHook.delete_and_wait

    def get_training_runtime(self, runtime_kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """A runtime from ``runtimes``; a ClusterTrainingRuntime is found whatever the namespace."""
        self._record("get_training_runtime", runtime_kind, name, namespace)
        scope = namespace if runtime_kind == "TrainingRuntime" else ""
        runtime = self.runtimes.get((runtime_kind, name, scope))
        return copy.deepcopy(runtime) if runtime is not None else None

    def list_job_pods(self, job_name: str, namespace: str, *, kind: Any) -> list[dict[str, Any]]:
        """The job's pods that carry the kind's job-name label, as the real hook's label selector picks them."""
        self._record("list_job_pods", job_name, namespace)
        if self.fail_list_pods is not None:
            raise self.fail_list_pods
        label = get_job_kind(kind).pod_labels.job_name
        pods = [pod for pod in self.pods.get(job_name, []) if pod["metadata"].get("labels", {}).get(label) == job_name]
        return copy.deepcopy(pods)

    def read_pod_log(
        self,
        pod_name: str,
        namespace: str,
        container: str | None = None,
        *,
        tail_lines: int | None = None,
        limit_bytes: int | None = 1_000_000,
        previous: bool = False,
        timestamps: bool = False,
        since_time: str | None = None,
    ) -> str:
        """The log as the kubelet serves it (see the class)."""
        self._record(
            "read_pod_log",
            pod_name,
            namespace,
            container,
            tail_lines=tail_lines,
            previous=previous,
            since_time=since_time,
        )
        if pod_name in self.fail_read_log:
            raise self.fail_read_log[pod_name]
        runs = self.log_runs.get(pod_name) or self._text_log_runs(pod_name)
        if previous and len(runs) < 2:
            return ""
        entries = runs[-2] if previous else runs[-1]
        if tail_lines is not None:
            entries = entries[-tail_lines:]
        if since_time is not None:
            since = int(datetime.fromisoformat(since_time.replace("Z", "+00:00")).timestamp()) * 10**9
            entries = [entry for entry in entries if entry[0] >= since]
        text = "".join(f"{log_stamp(at) + ' ' if timestamps else ''}{line}\n" for at, line in entries)
        return text.encode()[:limit_bytes].decode(errors="ignore") if limit_bytes is not None else text

    def list_warning_events(self, namespace: str, object_names: set[str]) -> list[dict[str, Any]]:
        self._record("list_warning_events", namespace, set(object_names))
        return [
            copy.deepcopy(event)
            for event in self.events
            if (event.get("involvedObject") or {}).get("name") in object_names
        ]

    def worker_clusters_extra(self) -> Any:
        return self.worker_clusters_value

    def worker_hook(self, conn_id: str) -> FakeTrainingJobHook:
        """The fake of the worker cluster ``conn_id`` names (``worker_hooks``); an unknown one fails as a
        connection that does not exist would."""
        if conn_id not in self.worker_hooks:
            raise LookupError(f"The conn_id `{conn_id}` isn't defined")
        return self.worker_hooks[conn_id]

    def collect_evidence(self, ref: Any, *, logger: Any = None) -> Any:
        """The real reads of the evidence (pods, logs, events through the calls above)."""
        from airflow_provider_disttrain.hooks.training_job import TrainingJobHook

        return TrainingJobHook.collect_evidence(self, ref, logger=logger)  # type: ignore[arg-type]


# -- the task context ------------------------------------------------------------------------------------


class FakeTI:
    """The task instance attributes and XCom calls the operators use."""

    def __init__(
        self,
        *,
        dag_id: str = "training_dag",
        task_id: str = "train",
        run_id: str = "manual__2024-05-01T10:00:00+00:00",
        map_index: int = -1,
        try_number: int = 1,
        start_date: datetime | None = None,
    ) -> None:
        self.dag_id = dag_id
        self.task_id = task_id
        self.run_id = run_id
        self.map_index = map_index
        self.try_number = try_number
        self.start_date = start_date or datetime.now(timezone.utc)
        self.xcoms: dict[str, Any] = {}
        self.pushed: list[tuple[str, Any]] = []

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed.append((key, value))
        self.xcoms[key] = value

    def xcom_pull(self, task_ids: Any = None, key: str = "return_value", **kwargs: Any) -> Any:
        return self.xcoms.get(key)


class FakeStateStore:
    """``task_state_store``: a per-task-instance key-value store that survives retries."""

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self.values: dict[str, Any] = dict(values or {})

    def get(self, key: str, default: Any = None) -> Any:
        return copy.deepcopy(self.values.get(key, default))

    def set(self, key: str, value: Any) -> None:
        self.values[key] = copy.deepcopy(value)


def make_context(ti: FakeTI | None = None, store: FakeStateStore | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {"ti": ti or FakeTI()}
    if store is not None:
        context["task_state_store"] = store
    return context


# -- the trigger's shared watch ----------------------------------------------------------------------


class InMemoryWatches:
    """``hooks.watch_registry.subscribe`` over a ``FakeTrainingJobHook``, for operator and DAG-run tests.

    Each time the trigger looks at its subscription it reads the in-memory job (moving it one step
    along its progression, as between two watch events); ``wait`` returns after a short pause, as a
    watch delivering the next change would. The watch itself is tested against a fake API server in
    ``tests/unit/hooks/test_shared_watch.py``.
    """

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.subscriptions: list[tuple[str, str, str]] = []

    @contextlib.asynccontextmanager
    async def subscribe(
        self, connection: Mapping[str, Any], kind: Any, namespace: str, name: str, **options: Any
    ) -> AsyncIterator[Any]:
        self.subscriptions.append((kind.kind, namespace, name))
        yield _InMemorySubscription(self.cluster, kind, namespace, name)


class _InMemorySubscription:
    synced = True
    problem = None
    listed = True  # every look reads the in-memory cluster afresh: a view newer than the subscription

    def __init__(self, cluster: Any, kind: Any, namespace: str, name: str) -> None:
        from types import SimpleNamespace

        self.cluster, self.kind, self.namespace, self.name = cluster, kind, namespace, name
        self.watch = SimpleNamespace(ever_synced=True)

    @property
    def entry(self) -> Any:
        from airflow_provider_disttrain.hooks.shared_watch import CachedJob

        job = self.cluster.get_job(self.kind, self.name, self.namespace)
        return CachedJob(job) if job is not None else None

    async def read(self) -> dict[str, Any] | None:
        return self.cluster.get_job(self.kind, self.name, self.namespace)

    async def read_view(self) -> dict[str, Any] | None:
        return await self.read()

    async def warning_events(self) -> list[dict[str, Any]]:
        return self.cluster.list_warning_events(self.namespace, {self.name})

    async def wait(self, timeout: float | None) -> None:
        await asyncio.sleep(0.01 if timeout is None else min(0.01, timeout))


def epoch(offset: float = 0.0) -> float:
    """Epoch seconds ``offset`` from now, on the running loop's clock (the virtual one in the trigger
    tests, see ``virtual_clock``)."""
    return clock.current().wall() + offset


class ManualClock:
    """The worker's clock in unit tests (a whole ``utils.clock.Clock``): a sleep moves it on at once, so a
    10 s poll interval or a 600 s deadline costs no real time (and a test that waits longer than it
    meant to is only slow in virtual seconds, never hung). Wall and monotonic time move together."""

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now  # starts at the real time: tests compare with datetime.now()
        self.sleeps: list[float] = []

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep_sync(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += max(0.0, seconds)

    async def sleep(self, seconds: float) -> None:
        self.sleep_sync(seconds)


def with_hook(operator: Any, hook: Any, manual_clock: ManualClock | None = None) -> Any:
    """Give ``operator`` the fake as its (cached) ``hook``, and a training job operator a ``ManualClock``
    for its deadlines and polls (``operator.clock``: ``manual_clock``, else the one the fake's jobs move
    on with, else a new one); returns the operator."""
    operator.__dict__["hook"] = hook
    if hasattr(operator, "clock"):
        operator.clock = manual_clock or getattr(hook, "clock", None) or ManualClock()
    return operator
