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
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_provider_disttrain.conditions import parse_time
from airflow_provider_disttrain.naming import (
    DAG_ID_LABEL,
    DEPLOYMENT_LABEL,
    LABEL_PREFIX,
    MAP_INDEX_LABEL,
    TASK_ID_LABEL,
    TASK_INSTANCE_LABEL,
    deployment_label_value,
    legacy_task_instance_key,
    resolve_deployment_id,
    task_instance_key,
)
from airflow_provider_disttrain.status import job_state

ORPHANED_SINCE_ANNOTATION = f"{LABEL_PREFIX}/orphaned-since"

# Task instance states no try comes out of again unless someone clears the task: its job has nobody
# left to wait for it. Every other state (running, deferred, queued, scheduled, up_for_retry,
# up_for_reschedule, restarting, none after a clear) has, or will have, a try that reattaches.
ENDED_STATES = frozenset({"success", "failed", "skipped", "upstream_failed", "removed"})


@dataclass(frozen=True)
class JobOwner:
    """The task instance a job's labels name.

    The dag and task ids are label values (identical to the ids for any id of at most 63 characters);
    the run id is known only through ``key``, the hash of the whole identity: label values cannot hold
    a run id's ``:`` and ``+``.
    """

    dag_id: str
    task_id: str
    map_index: int
    key: str
    deployment: str | None = None
    """The ``DEPLOYMENT_LABEL`` value (a hash of the deployment id); None on jobs made before it existed."""


def owner_of(job: Mapping[str, Any]) -> JobOwner | None:
    """The task instance named by the job's labels; None for a job the provider's operators did not label."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    key, dag_id, task_id = (labels.get(label) for label in (TASK_INSTANCE_LABEL, DAG_ID_LABEL, TASK_ID_LABEL))
    if not (key and dag_id and task_id):
        return None
    map_index = labels.get(MAP_INDEX_LABEL)  # absent for an unmapped task (see task_instance_labels)
    index = int(map_index) if map_index and map_index.isdigit() else -1
    return JobOwner(dag_id, task_id, index, key, labels.get(DEPLOYMENT_LABEL))


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
    ``deployment_id``: this Airflow's (None: from the configuration)."""
    if another_deployments(owner, deployment_id):
        return None
    deployment = resolve_deployment_id(deployment_id)
    name = task_state_name(owner.task_id, owner.map_index)
    for run_id, states in task_states.items():
        key = (
            legacy_task_instance_key(owner.dag_id, owner.task_id, run_id, owner.map_index)
            if owner.deployment is None
            else task_instance_key(owner.dag_id, owner.task_id, run_id, owner.map_index, deployment)
        )
        if name in states and key == owner.key:
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


def orphaned_since(job: Mapping[str, Any]) -> datetime | None:
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    since = parse_time(annotations.get(ORPHANED_SINCE_ANNOTATION))
    # Written in UTC by the cleanup; a hand-edited value without an offset is read as UTC too.
    return since.replace(tzinfo=timezone.utc) if since is not None and since.tzinfo is None else since


def judge(
    job: Mapping[str, Any],
    task_instance: tuple[str, str | None] | None,
    now: datetime,
    grace_period: timedelta,
    deployment_id: str | None = None,
) -> Verdict:
    """What the cleanup does with ``job``, given its task instance's ``(run id, state)`` (or None).

    ``deployment_id``: this Airflow's (None: from the configuration). Another deployment's job is never
    touched: its task instance's state is that deployment's, whatever this Airflow's run of the same id says.
    """
    if (owner := owner_of(job)) is not None and another_deployments(owner, deployment_id):
        # The same words for every such job: the cleanup's report may count kept jobs by their reason.
        return Verdict(Action.KEEP, "made by another Airflow deployment (its deployment label is not this one's)")
    marked = orphaned_since(job)
    if task_instance is None:
        return Verdict(Action.KEEP, "no task instance of this Airflow matches its labels")
    run_id, state = task_instance
    if state not in ENDED_STATES:
        described = f"its task instance (run {run_id}) is {state or 'cleared'}"
        return Verdict(Action.UNMARK, f"{described} again") if marked else Verdict(Action.KEEP, described)
    current = job_state(job)
    if current.is_terminal:
        # A finished job holds no GPUs; keeping it for inspection is delete_on_finish's and TTL's business.
        return Verdict(Action.KEEP, f"the job has {current.value} (task instance {state})")
    orphaned = f"task instance (run {run_id}) {state}, job {current.value}"
    if grace_period <= timedelta(0) or (marked is not None and now - marked >= grace_period):
        return Verdict(Action.DELETE, orphaned)
    if marked is None:
        return Verdict(Action.MARK, f"{orphaned}: deleted once {grace_period} has passed")
    return Verdict(Action.KEEP, f"{orphaned}, orphaned since {marked.isoformat()}: deleted after {grace_period}")
