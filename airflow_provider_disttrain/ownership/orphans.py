"""Which training jobs have outlived the Airflow task instance that created them, and what to do with each.

Every job the operators create carries its task instance's labels (``naming.task_instance_labels``).
When a task ends without its ``on_kill`` running (its worker process SIGKILLed, its node lost) and no
retry is left to reattach, the job runs on, holding GPUs, with nobody waiting for it. The cleanup
(``operators/orphans.py``) lists the labelled jobs, asks Airflow for their task instances' states and
lets ``judge`` decide here for each job, purely: keep it, mark it orphaned, or delete it.

The grace period counts from the first cleanup run that saw the job orphaned: that run writes the
time into the job's ``orphaned-since`` annotation (visible with kubectl), a later run deletes the job
once the grace period has passed, and a run that finds the task instance active again (someone cleared
it, so its new try reattaches to the job) takes the mark off.

A job submitted with ``wait_for_completion=False`` is never its submitter's orphan: that task ends as
soon as the job exists, by design, and someone else (a ``TrainingJobSensor``, a person) waits for it.
The operators say so in the job's ``wait-for-completion`` annotation.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kube.conditions import parse_time
from airflow_provider_disttrain.ownership.naming import (
    DAG_ID_ANNOTATION,
    DAG_ID_LABEL,
    DEPLOYMENT_LABEL,
    LABEL_PREFIX,
    MAP_INDEX_LABEL,
    TASK_ID_ANNOTATION,
    TASK_ID_LABEL,
    TASK_INSTANCE_LABEL,
    WAIT_FOR_COMPLETION_ANNOTATION,
    LoopRegion,
    deployment_label_value,
    legacy_task_instance_key,
    loop_region_of,
    resolve_deployment_id,
    task_instance_key,
)

ORPHANED_SINCE_ANNOTATION = f"{LABEL_PREFIX}/orphaned-since"

# Task instance states no try comes out of again unless someone clears the task: its job has nobody
# left to wait for it. Every other state (running, deferred, queued, scheduled, up_for_retry,
# up_for_reschedule, restarting, none after a clear) has, or will have, a try that reattaches.
ENDED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})

# Why a job is kept, in few words: the cleanup's report counts kept jobs by these instead of listing
# every one (a namespace's history of finished jobs runs to thousands).
KEPT_NOT_WAITED_FOR = "submitted with wait_for_completion=False"
KEPT_UNKNOWN = "no task instance of this Airflow matches"
KEPT_ACTIVE = "its task instance is active"
KEPT_FINISHED = "the job has finished"
KEPT_IN_GRACE = "orphaned, within the grace period"
KEPT_OTHER_DEPLOYMENT = "made by another Airflow deployment"
KEPT_LOOP_RUNNING = "its Task Loop is still running"


@dataclass(frozen=True)
class JobOwner:
    """The task instance a job's labels (and annotations) name.

    The dag and task ids are the full ids the operators write into annotations; for a job an older
    version created, without them, the label values (identical to the ids for any id of at most 63
    characters of ``[A-Za-z0-9_.-]`` that starts and ends alphanumeric). The run id is known only
    through ``key``, the hash of the whole identity: label values cannot hold a run id's ``:`` and ``+``.
    Either way ``key`` decides (``find_task_instance``): an id that is not the job's own matches nothing.
    """

    dag_id: str
    task_id: str
    map_index: int
    task_instance_key: str
    deployment: str | None = None
    """The ``DEPLOYMENT_LABEL`` value (a hash of the deployment id); None on jobs made before it existed."""
    loop: LoopRegion | None = None
    """Where in an Airflow 3.4 Task Loop the task instance ran (its labels); None outside a loop."""


def job_owner(job: Mapping[str, Any]) -> JobOwner | None:
    """The task instance named by the job's labels; None for a job the provider's operators did not label."""
    metadata = job.get("metadata") or {}
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    key = labels.get(TASK_INSTANCE_LABEL)
    dag_id = annotations.get(DAG_ID_ANNOTATION) or labels.get(DAG_ID_LABEL)
    task_id = annotations.get(TASK_ID_ANNOTATION) or labels.get(TASK_ID_LABEL)
    if not (key and dag_id and task_id):
        return None
    map_index = labels.get(MAP_INDEX_LABEL)  # absent for an unmapped task (see task_instance_labels)
    index = int(map_index) if map_index and map_index.isdigit() else -1
    return JobOwner(dag_id, task_id, index, key, labels.get(DEPLOYMENT_LABEL), loop_region_of(labels))


def another_deployments(owner: JobOwner, deployment_id: str | None = None) -> bool:
    """Whether the job is labelled with another Airflow deployment than ``deployment_id`` (None: this
    one's). A job without the label (made before it existed) is judged as it always was."""
    return owner.deployment is not None and owner.deployment != deployment_label_value(
        resolve_deployment_id(deployment_id)
    )


def task_state_name(task_id: str, map_index: int) -> str:
    """How Airflow's execution API names a task instance in ``get_task_states``' answer (one dict per
    run id): the task id, and ``<task id>_<map index>`` for a mapped one."""
    return f"{task_id}_{map_index}" if map_index >= 0 else task_id


def find_task_instance(
    owner: JobOwner, task_states: Mapping[str, Mapping[str, str | None]], deployment_id: str | None = None
) -> tuple[str, str | None] | None:
    """``(run id, state)`` of the owner's task instance among ``get_task_states(dag_id, task_ids=[task])``'s
    answer; None when no run of that DAG has it (its run deleted, or the job is another Airflow's).
    ``deployment_id``: this Airflow's (None: from the configuration).

    For a task in a Task Loop, Airflow answers the state of the loop's newest iteration only (under the
    same name for every iteration): the key, which hashes the job's own region, still says the job is of
    that run, and ``judge`` reads the state as the newest iteration's, not necessarily the job's."""
    if another_deployments(owner, deployment_id):
        return None
    deployment = resolve_deployment_id(deployment_id)
    name = task_state_name(owner.task_id, owner.map_index)
    for run_id, states in task_states.items():
        key = (
            legacy_task_instance_key(owner.dag_id, owner.task_id, run_id, owner.map_index, owner.loop)
            if owner.deployment is None
            else task_instance_key(owner.dag_id, owner.task_id, run_id, owner.map_index, deployment, owner.loop)
        )
        if name in states and key == owner.task_instance_key:
            return run_id, states[name]
    return None


class Action(str, enum.Enum):
    KEEP = "keep"
    MARK = "mark"
    """Write ``orphaned-since``: the grace period starts."""
    UNMARK = "unmark"
    """Remove ``orphaned-since``: the task instance is active again."""
    DELETE = "delete"


@dataclass(frozen=True)
class Verdict:
    action: Action
    reason: str
    kept_because: str | None = None
    """For a KEEP, the few words the report counts it under (one of the ``KEPT_*``); None: ``reason``."""


def orphaned_since(job: Mapping[str, Any]) -> datetime | None:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    since = parse_time(annotations.get(ORPHANED_SINCE_ANNOTATION))
    # Written in UTC by the cleanup; a hand-edited value without an offset is read as UTC too.
    return since.replace(tzinfo=timezone.utc) if since is not None and since.tzinfo is None else since


def waited_for_by_submitter(job: Mapping[str, Any]) -> bool:
    """False for a job its operator submitted with ``wait_for_completion=False`` (its annotation says so).

    A job without the annotation (an older version's) counts as waited for, as those versions judged it.
    """
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(WAIT_FOR_COMPLETION_ANNOTATION, "true")).strip().lower() != "false"


def needs_judging(view: JobView) -> bool:
    """False for a finished job without an ``orphaned-since`` mark: ``judge`` keeps it whatever its task
    instance's state, so the cleanup need neither ask Airflow about it nor hold it in memory."""
    return not view.is_terminal or orphaned_since(view.job or {}) is not None


def judge(
    view: JobView,
    task_instance: tuple[str, str | None] | None,
    now: datetime,
    grace_period: timedelta,
    deployment_id: str | None = None,
) -> Verdict:
    """What the cleanup does with ``view``'s job (as the cleanup's list read it), given its task instance's
    ``(run id, state)`` (or None).

    ``deployment_id``: this Airflow's (None: from the configuration). Another deployment's job is never
    touched: its task instance's state is that deployment's, whatever this Airflow's run of the same id says.
    """
    job = view.job or {}
    if (owner := job_owner(job)) is not None and another_deployments(owner, deployment_id):
        return Verdict(
            Action.KEEP, f"{KEPT_OTHER_DEPLOYMENT} (its deployment label is not this one's)", KEPT_OTHER_DEPLOYMENT
        )
    marked = orphaned_since(job)
    if not waited_for_by_submitter(job):
        # Its task ended as soon as the job was created: a sensor or a person waits for it now. A mark
        # (written by an older version of the cleanup) comes off, so that nothing deletes it later.
        described = f"{KEPT_NOT_WAITED_FOR}: its task ends once the job exists, and others may wait for it"
        return Verdict(Action.UNMARK, described) if marked else Verdict(Action.KEEP, described, KEPT_NOT_WAITED_FOR)
    if task_instance is None:
        return Verdict(Action.KEEP, f"{KEPT_UNKNOWN} its labels", KEPT_UNKNOWN)
    run_id, state = task_instance
    if state not in ENDED_STATES and owner is not None and owner.loop is not None:
        # The state is the loop's newest iteration's: this job's iteration may have ended long ago or be
        # the one running. Iterations run one after another, so once the newest has ended this one has too
        # (judged below); until then nothing is marked or deleted, and a mark stays for that time.
        described = f"{KEPT_LOOP_RUNNING} (run {run_id}, newest iteration {state or 'cleared'})"
        return Verdict(Action.KEEP, described, KEPT_LOOP_RUNNING)
    if state not in ENDED_STATES:
        described = f"its task instance (run {run_id}) is {state or 'cleared'}"
        return Verdict(Action.UNMARK, f"{described} again") if marked else Verdict(Action.KEEP, described, KEPT_ACTIVE)
    current = view.state or JobState.QUEUED  # (a listed job is always found)
    if current.is_terminal:
        # A finished job holds no GPUs; keeping it for inspection is delete_on_finish's and TTL's business.
        return Verdict(Action.KEEP, f"the job has {current.value} (task instance {state})", KEPT_FINISHED)
    orphaned = f"task instance (run {run_id}) {state}, job {current.value}"
    if grace_period <= timedelta(0) or (marked is not None and now - marked >= grace_period):
        return Verdict(Action.DELETE, orphaned)
    if marked is None:
        return Verdict(Action.MARK, f"{orphaned}: deleted once {grace_period} has passed")
    return Verdict(
        Action.KEEP, f"{orphaned}, orphaned since {marked.isoformat()}: deleted after {grace_period}", KEPT_IN_GRACE
    )
