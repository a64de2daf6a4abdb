"""What the UI shows about training jobs, built from the job objects as the API server returns them.

Pure functions: no I/O, no clock of their own (``now`` is passed in). They read a job through the
provider's own status modules (``status``, ``kueue``, ``progress``), so the tab shows the state the
task's waiter decides on, and pick only the fields worth showing: never a pod template, an env value
or anything from the connection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from airflow_provider_disttrain.failures.diagnostics import pod_problems, replica_name
from airflow_provider_disttrain.job.gpus import gpus_held, replica_specs
from airflow_provider_disttrain.job.kinds import JobKind
from airflow_provider_disttrain.job.progress import replicas_text, waiting_text
from airflow_provider_disttrain.job.status import JobState, failure_condition
from airflow_provider_disttrain.job.usage import USAGE_ANNOTATION, Usage, job_usage
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kube.conditions import conditions, is_true, parse_time
from airflow_provider_disttrain.kueue.dispatch import dispatched_to
from airflow_provider_disttrain.kueue.hold import admitted_at, held_by_kueue, queue_name, waiting_message
from airflow_provider_disttrain.ownership.naming import (
    DAG_ID_LABEL,
    DAG_KEY_LABEL,
    DEPLOYMENT_LABEL,
    MAP_INDEX_LABEL,
    RUN_ID_LABEL,
    TASK_ID_LABEL,
    TASK_INSTANCE_LABEL,
    TRY_NUMBER_LABEL,
    LoopRegion,
    dag_key,
    deployment_label_value,
    legacy_task_instance_key,
    loop_region_of,
    resolve_deployment_id,
    sanitize_label_value,
    task_instance_key,
)

NEWEST_CONDITIONS = 5
NEWEST_EVENTS = 5


def _metadata(job: Mapping[str, Any]) -> Mapping[str, Any]:
    return job.get("metadata") or {}


def _labels(job: Mapping[str, Any]) -> Mapping[str, str]:
    return _metadata(job).get("labels") or {}


def _found(view: JobView) -> tuple[Mapping[str, Any], JobKind, JobState]:
    """The job, its kind entry and its state of a view of a job the UI read (always found)."""
    if view.job is None or view.kind is None or view.state is None:
        raise ValueError(f"{view.ref.title}: the UI shows only a job it read")
    return view.job, view.kind, view.state


def restarts(kind: JobKind, pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Container restarts of a job's pods now, per replica type (as the pods' labels name it)."""
    total: dict[str, int] = {}
    for pod in pods:
        replica = str(((pod.get("metadata") or {}).get("labels") or {}).get(kind.pod_labels.replica_type) or "")
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        total[replica.lower()] = total.get(replica.lower(), 0) + sum(int(c.get("restartCount") or 0) for c in statuses)
    return total


def replicas(view: JobView, pods: Iterable[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One row per replica type: desired (spec), active/succeeded/failed (status), GPUs per replica, and
    with ``pods`` the restarts of their containers."""
    job, kind, _ = _found(view)
    restarted = restarts(kind, pods) if pods is not None else None
    counts = view.replicas
    specs = replica_specs(job)
    rows = []
    for replica in sorted({*specs, *counts}):
        counters = counts.get(replica, {})
        rows.append(
            {
                "type": replica,
                "desired": specs.get(replica, {}).get("desired", 0),
                "active": counters.get("active", 0),
                "succeeded": counters.get("succeeded", 0),
                "failed": counters.get("failed", 0),
                "gpus_per_replica": specs.get(replica, {}).get("gpus", 0),
                **({"restarts": restarted.get(replica.lower(), 0)} if restarted is not None else {}),
            }
        )
    return rows


def _first_true(job: Mapping[str, Any], types: Iterable[str]) -> str | None:
    wanted = set(types)
    times = [
        str(c.get("lastTransitionTime") or "")
        for c in conditions(job)
        if c.get("type") in wanted and is_true(c) and c.get("lastTransitionTime")
    ]
    return min(times) if times else None


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def timeline(view: JobView) -> list[dict[str, Any]]:
    """The job's steps with the time each was reached (None: not reached): created, queued by Kueue
    and admitted (Kueue jobs only), running, finished (succeeded or failed)."""
    job, kind, state = _found(view)
    steps: list[dict[str, Any]] = [{"step": "created", "time": _metadata(job).get("creationTimestamp")}]
    if queue_name(job) is not None:
        steps.append({"step": "queued", "time": _first_true(job, ["Suspended"])})
        steps.append({"step": "admitted", "time": _iso(admitted_at(job))})
    result = view.result(kind.kind)
    # The Running condition's time while it is true; once it flipped (finished, suspended) the status's
    # start time (a TrainJob's: from its conditions), as the task's result reports it.
    running = _first_true(job, ["Running"]) or (result["start_time"] if view.has_run else None)
    steps.append({"step": "running", "time": running})
    finished = (
        (result["completion_time"] or _first_true(job, ["Failed", kind.status.success_condition]))
        if state.is_terminal
        else None
    )
    steps.append({"step": state.value if state.is_terminal else "finished", "time": finished})
    return steps


def _seconds_between(start: Any, end: Any) -> float | None:
    begin, finish = parse_time(start), parse_time(end)
    return round((finish - begin).total_seconds(), 1) if begin and finish else None


def _durations(view: JobView, now: float) -> dict[str, float | None]:
    """Seconds spent waiting (created until running, or until now) and running (until finished or now)."""
    steps = {step["step"]: step["time"] for step in timeline(view)}
    now_iso = _iso(now)
    finished = next((steps[key] for key in ("succeeded", "failed", "finished") if steps.get(key)), None)
    running = steps.get("running")
    return {
        "queued_seconds": _seconds_between(steps["created"], running or finished or now_iso),
        "running_seconds": _seconds_between(running, finished or now_iso) if running else None,
    }


def task_instance_of(job: Mapping[str, Any]) -> dict[str, Any]:
    """The task instance the job's labels name (label values: DAG, task and run ids sanitized and cut to
    63 characters); ``task_instance_key`` is the hash the provider selects on, ``dag_key`` the hash of the full DAG id
    (``readable`` replaces ``dag_id`` by the full id it stands for)."""
    labels = _labels(job)
    map_index = labels.get(MAP_INDEX_LABEL)
    loop = loop_region_of(labels)
    return {
        "dag_id": labels.get(DAG_ID_LABEL),
        "dag_key": labels.get(DAG_KEY_LABEL),
        "task_id": labels.get(TASK_ID_LABEL),
        "run_id_label": labels.get(RUN_ID_LABEL),
        "map_index": int(map_index) if map_index is not None and map_index.lstrip("-").isdigit() else -1,
        "try_number": labels.get(TRY_NUMBER_LABEL),
        "task_instance_key": labels.get(TASK_INSTANCE_LABEL),
        "deployment": labels.get(DEPLOYMENT_LABEL),
        # In an Airflow 3.4 Task Loop: the coordinates Airflow's UI names the iteration's task instance by.
        "region_id": loop.region_id if loop else None,
        "region_index": loop.region_index if loop else None,
        "loop_iteration": loop.iteration if loop else None,
    }


def _condition_rows(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    rows = [
        {key: c.get(key) for key in ("type", "status", "reason", "message", "lastTransitionTime")}
        for c in conditions(job)
    ]
    rows.sort(key=lambda row: str(row.get("lastTransitionTime") or ""), reverse=True)
    return rows[:NEWEST_CONDITIONS]


def job_summary(job: Mapping[str, Any], *, now: float) -> dict[str, Any]:
    """One row of the jobs page: identity, state, GPUs held, time queued and running, its task instance."""
    return _summary(JobView.of(job), now)


def _summary(view: JobView, now: float) -> dict[str, Any]:
    job, _, state = _found(view)
    metadata = _metadata(job)
    return {
        "kind": job.get("kind"),
        "namespace": metadata.get("namespace"),
        "name": metadata.get("name"),
        "state": state.value,
        "queue": queue_name(job),
        "held_by_kueue": held_by_kueue(job),
        "gpus_held": gpus_held(view),
        "gpu_seconds": None if (recorded := recorded_usage(job)) is None else recorded.gpu_seconds,
        **_durations(view, now),
        "task_instance": task_instance_of(job),
    }


def recorded_usage(job: Mapping[str, Any]) -> Usage | None:
    """What the task that saw the job finish recorded it held (``usage.USAGE_ANNOTATION``); None before it
    finished, for a job finished without a task (or before the provider recorded it), or a refused patch."""
    return Usage.from_annotation((_metadata(job).get("annotations") or {}).get(USAGE_ANNOTATION))


def _usage(job: Mapping[str, Any], pods: list[Mapping[str, Any]] | None, now: float) -> dict[str, Any] | None:
    """The tab's ``usage``: the task's record once the job finished; until then (or without one) what the
    pods the tab read say so far; None without either."""
    usage = recorded_usage(job)
    if usage is None and pods is not None:
        usage = job_usage(pods, created=_metadata(job).get("creationTimestamp"), now=now)
    return None if usage is None else usage.as_dict()


def pod_rows(kind: JobKind, pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per pod of a job of ``kind``: the replica it plays, its phase, its containers' restarts and
    what is wrong with it (``diagnostics``' words: OOMKilled, ImagePullBackOff, Unschedulable and why)."""
    rows = [
        {
            "replica": replica_name(kind, pod),
            "phase": (pod.get("status") or {}).get("phase"),
            "restarts": sum(
                int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or []
            ),
            "problems": pod_problems(pod),
        }
        for pod in pods
    ]
    return sorted(rows, key=lambda row: row["replica"])


def warning_events(events: Iterable[Mapping[str, Any]], newest: int = NEWEST_EVENTS) -> list[dict[str, Any]]:
    """The newest Warning events about the job and its pods: object, reason, message, count, when."""
    rows = [
        {
            "object": (event.get("involvedObject") or {}).get("name"),
            "reason": event.get("reason"),
            "message": event.get("message"),
            # A number, whatever the object (or a cache file) held: the page prints it.
            "count": count if type(count := event.get("count")) is int and count > 0 else 1,
            "time": event.get("lastTimestamp") or event.get("eventTime"),
        }
        for event in events
        if event.get("type", "Warning") == "Warning"
    ]
    rows.sort(key=lambda row: str(row["time"] or ""), reverse=True)
    return rows[:newest]


def job_detail(
    job: Mapping[str, Any],
    *,
    now: float,
    workload: Mapping[str, Any] | None = None,
    pods: Iterable[Mapping[str, Any]] | None = None,
    events: Iterable[Mapping[str, Any]] = (),
    log: Mapping[str, Any] | None = None,
    cluster: str | None = None,
) -> dict[str, Any]:
    """Everything the task instance's tab shows about its job (``workload``: its Kueue Workload; ``pods``
    and ``events``: its pods and their and its Warning events; ``log``: the leader's last lines, when read;
    ``cluster``: the MultiKueue worker cluster it runs on, else the ``workload``'s, else None: this one)."""
    pods = list(pods) if pods is not None else None
    seen = JobView.of(job)  # the one look at the job the tab shows
    _, kind, state = _found(seen)
    waiting = None
    if state in (JobState.QUEUED, JobState.SUSPENDED):
        kueue_reason = waiting_message(workload) if workload is not None else None
        waiting = waiting_text(job, kueue_reason)
    failure = failure_condition(job)
    progress = seen.describe()
    if text := replicas_text(seen):
        progress += f" | replicas {text}"
    return {
        **_summary(seen, now),
        "uid": _metadata(job).get("uid"),
        "cluster": cluster or dispatched_to(workload),
        "timeline": timeline(seen),
        "replicas": replicas(seen, pods),
        "pods": pod_rows(kind, pods or []),
        "events": warning_events(events),
        "log": dict(log) if log else None,
        "progress": progress,
        "waiting": waiting,
        "conditions": _condition_rows(job),
        "failure": {"reason": failure[0], "message": failure[1]} if failure else None,
        "usage": _usage(job, pods, now),
    }


def _is_instances(labels: Mapping[str, str], task_instance_key: str, legacy_task_instance_key: str | None) -> bool:
    """Whether a job's labels name the task instance of ``task_instance_key`` (this deployment's key), or
    of ``legacy_task_instance_key`` for a job made before the deployment label existed (``identity.owns``
    decides alike)."""
    key = labels.get(TASK_INSTANCE_LABEL)
    legacy = legacy_task_instance_key is not None and DEPLOYMENT_LABEL not in labels
    return key == task_instance_key or (legacy and key == legacy_task_instance_key)


def newest_job_of(
    jobs: Iterable[Mapping[str, Any]], task_instance_key: str, legacy_task_instance_key: str | None = None
) -> Mapping[str, Any] | None:
    """The newest job labelled for the task instance of ``task_instance_key`` (a retry's replaces an
    earlier try's); ``legacy_task_instance_key`` also finds the instance's job made before the deployment
    label existed."""
    mine = [job for job in jobs if _is_instances(_labels(job), task_instance_key, legacy_task_instance_key)]
    mine.sort(key=lambda job: str(_metadata(job).get("creationTimestamp") or ""))
    return mine[-1] if mine else None


def page(summaries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The jobs page: the rows (by namespace and name), the GPUs held per namespace and per queue, and the
    GPU-seconds the listed jobs used per namespace and queue (``usage_totals``)."""
    rows = sorted(summaries, key=lambda row: (str(row["namespace"]), str(row["name"])))
    per_namespace: dict[str, int] = {}
    per_queue: dict[str, int] = {}
    for row in rows:
        per_namespace[row["namespace"]] = per_namespace.get(row["namespace"], 0) + row["gpus_held"]
        if row["queue"]:
            queue = f"{row['namespace']}/{row['queue']}"
            per_queue[queue] = per_queue.get(queue, 0) + row["gpus_held"]
    return {
        "jobs": rows,
        "gpus_per_namespace": per_namespace,
        "gpus_per_queue": per_queue,
        "totals": usage_totals(rows),
    }


def usage_totals(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per namespace and queue (None: jobs of no queue), the GPU-seconds of the rows that have a figure and
    how many those are (a job still running, or finished without a record, adds to neither)."""
    totals: dict[tuple[str, str | None], dict[str, Any]] = {}
    for row in rows:
        if row.get("gpu_seconds") is None:
            continue
        key = (str(row["namespace"]), row["queue"] or None)
        total = totals.setdefault(key, {"namespace": key[0], "queue": key[1], "gpu_seconds": 0.0, "jobs": 0})
        total["gpu_seconds"] = round(total["gpu_seconds"] + float(row["gpu_seconds"]), 1)
        total["jobs"] += 1
    return [totals[key] for key in sorted(totals, key=lambda key: (key[0], key[1] or ""))]


# Airflow 3.4's region of a task instance outside every loop and mapping.
SENTINEL_REGION_ID = "00000000-0000-0000-0000-000000000000"


def _loop_keys(ti: tuple[Any, ...]) -> list[str]:
    """The keys a job of the row ``(dag_id, task_id, run_id, region_index, region_id)`` has if the row is a
    task instance in a Task Loop: its public map index is -1 (a task of the loop body) or the region index
    (mapped inside an iteration), which the row does not say; both hash its exact region, so neither
    can name another task instance's job."""
    if len(ti) < 5 or ti[4] in (None, SENTINEL_REGION_ID):
        return []
    dag_id, task_id, run_id, index, region_id = ti[:5]
    loop = LoopRegion(str(region_id), int(index), int(index))
    return [task_instance_key(dag_id, task_id, run_id, map_index, loop=loop) for map_index in (-1, int(index))]


def link_task_instances(
    summaries: Iterable[dict[str, Any]], task_instances: Iterable[tuple[Any, ...]]
) -> list[dict[str, Any]]:
    """The rows with each job's task instance completed from Airflow's own ``(dag_id, task_id, run_id,
    map_index[, region_id])`` rows (Airflow 3.4 adds the region, and its ``map_index`` is the region
    index): the labels hold the run id sanitized, the key hash names the exact instance.
    A job whose task instance is not among them keeps ``run_id`` None (no link)."""
    task_instances = [tuple(ti) for ti in task_instances]
    by_key = {task_instance_key(*ti[:4]): ti for ti in task_instances}
    # A looped job's key hashes its region too (naming.LoopRegion): the iteration's own row links it.
    by_key.update({key: ti for ti in task_instances for key in _loop_keys(ti)})
    # Jobs made before the deployment label carry the key without the deployment (legacy_task_instance_key).
    by_legacy_key = {legacy_task_instance_key(*ti[:4]): ti for ti in task_instances}
    linked = []
    for row in summaries:
        instance = row["task_instance"]
        keys = by_key if instance.get("deployment") else by_legacy_key
        ti = keys.get(str(instance.get("task_instance_key")))
        linked.append({**row, "task_instance": {**row["task_instance"], "run_id": ti[2] if ti else None}})
    return linked


def this_deployments(summaries: Iterable[dict[str, Any]], deployment_id: str | None = None) -> list[dict[str, Any]]:
    """The rows of jobs this Airflow deployment made (``deployment_id``, None: this one's), and of jobs made
    before the deployment label existed; another deployment's jobs are its own UI's to show."""
    mine = deployment_label_value(resolve_deployment_id(deployment_id))
    return [row for row in summaries if row["task_instance"].get("deployment") in (None, mine)]


def readable(
    summaries: Iterable[dict[str, Any]], dag_ids: Iterable[str], known_dag_ids: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """The rows of the DAGs in ``dag_ids`` (those the user may read), each with its full DAG id.

    Decided on the ``dag_key`` label (a hash of the full DAG id), never on the DAG-id label: that one is
    sanitized and cut, so ``etl`` and ``_etl``, or two ids sharing 63 characters, carry the same label.
    A job made before the provider wrote ``dag_key`` is shown only when exactly one DAG id Airflow knows
    (``known_dag_ids``, with ``dag_ids``) gives its label and the user may read that one; a label two DAG
    ids give is nobody's to show. (A DAG deleted from Airflow no longer counts as one of those ids.)
    A job without a DAG label is no task's of this provider and never shown.
    """
    readable_ids = set(dag_ids)
    by_key = {dag_key(dag_id): dag_id for dag_id in readable_ids}
    by_label: dict[str, set[str]] = {}
    for dag_id in readable_ids | set(known_dag_ids):
        by_label.setdefault(sanitize_label_value(dag_id), set()).add(dag_id)
    rows = []
    for row in summaries:
        instance = row["task_instance"]
        full_id: str | None
        if instance.get("dag_key"):
            full_id = by_key.get(str(instance["dag_key"]))
        else:
            candidates = by_label.get(str(instance.get("dag_id") or ""), set())
            full_id = next(iter(candidates)) if len(candidates) == 1 else None
        if full_id is not None and full_id in readable_ids:
            rows.append({**row, "task_instance": {**instance, "dag_id": full_id}})
    return rows


def matches(row: Mapping[str, Any], *, state: str | None, namespace: str | None, dag_id: str | None) -> bool:
    """Whether a row passes the page's filters (None: no filter); a row of ``readable``'s (full DAG id)."""
    return (
        (not state or row["state"] == state)
        and (not namespace or row["namespace"] == namespace)
        and (not dag_id or row["task_instance"].get("dag_id") == dag_id)
    )


# -- what the UI's cache keeps of the objects it reads (in memory and in ``ui_cache_dir``) ----------------

_JOB_METADATA = ("name", "namespace", "uid", "labels", "creationTimestamp", "deletionTimestamp", "generation")
_POD_METADATA = ("name", "namespace", "labels", "creationTimestamp", "deletionTimestamp")
# Fields of a pod template, a TrainJob's trainer or a container that the view never reads and that may
# hold secrets (env values, command lines) or a whole spec (``last-applied-configuration``).
_NEVER_KEPT = frozenset({"env", "envFrom", "command", "args", "volumes", "volumeMounts"})


def _pod_spec_read(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Of a pod spec (a template's or a pod's): its containers' names and resources (GPUs, the main container)."""
    return {
        "containers": [
            {key: container[key] for key in ("name", "resources") if key in container}
            for container in spec.get("containers") or []
            if isinstance(container, Mapping)
        ]
    }


def _spec_read(value: Any) -> Any:
    if isinstance(value, Mapping):
        if isinstance(value.get("containers"), list):
            return _pod_spec_read(value)
        return {key: _spec_read(item) for key, item in value.items() if key not in _NEVER_KEPT}
    if isinstance(value, list):
        return [_spec_read(item) for item in value]
    return value


def job_read(job: Mapping[str, Any]) -> dict[str, Any]:
    """What the view reads of a job: its identity, labels, spec without pod details (replica counts,
    suspension, GPU limits) and status; never an env value, a command line or an annotation but the
    provider's record of its usage (``recorded_usage``)."""
    metadata = _metadata(job)
    annotations = metadata.get("annotations") or {}
    kept = {key: annotations[key] for key in (USAGE_ANNOTATION,) if key in annotations}
    return {
        "apiVersion": job.get("apiVersion"),
        "kind": job.get("kind"),
        "metadata": {key: metadata[key] for key in _JOB_METADATA if key in metadata}
        | ({"annotations": kept} if kept else {}),
        "spec": _spec_read(job.get("spec") or {}),
        "status": job.get("status") or {},
    }


def pod_read(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the view reads of a pod: its identity, labels, containers' names and its status."""
    metadata = _metadata(pod)
    return {
        "metadata": {key: metadata[key] for key in _POD_METADATA if key in metadata},
        "spec": _pod_spec_read(pod.get("spec") or {}),
        "status": pod.get("status") or {},
    }


def event_read(event: Mapping[str, Any]) -> dict[str, Any]:
    """What ``warning_events`` reads of an event."""
    kept = {
        key: event[key] for key in ("type", "reason", "message", "count", "lastTimestamp", "eventTime") if key in event
    }
    return {**kept, "involvedObject": {"name": (event.get("involvedObject") or {}).get("name")}}
