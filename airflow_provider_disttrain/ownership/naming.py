"""Job names and the labels that tie a job to the Airflow task instance that created it.

Pure functions: no Kubernetes client, no Airflow context objects, only strings in and strings out (a
deployment id left out is this Airflow's, read from its configuration: ``deployment.py``).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass

# The Kubernetes rules these names must obey (DNS-1035, label values) are kube/rules.py's.

MAX_NAME_LENGTH = 63
SUFFIX_LENGTH = 6
_SUFFIX_ALPHABET = string.ascii_lowercase + string.digits

LABEL_PREFIX = "disttrain.airflow.apache.org"
DAG_ID_LABEL = f"{LABEL_PREFIX}/dag-id"
TASK_ID_LABEL = f"{LABEL_PREFIX}/task-id"
RUN_ID_LABEL = f"{LABEL_PREFIX}/run-id"
MAP_INDEX_LABEL = f"{LABEL_PREFIX}/map-index"
TRY_NUMBER_LABEL = f"{LABEL_PREFIX}/try-number"
# Label values are cut to 63 characters, so two long run ids could collide; the hash of the full
# task-instance identity is what reattachment selects on.
TASK_INSTANCE_LABEL = f"{LABEL_PREFIX}/task-instance"
# The Airflow deployment that made the job (``deployment.py``): a hash of the exact id, never the id cut or
# sanitized to fit a label value, so that no two ids share it. Jobs made before it existed lack it.
DEPLOYMENT_LABEL = f"{LABEL_PREFIX}/deployment"
# The DAG-id label is cut and sanitized (``etl`` and ``_etl`` both give ``etl``): who may see a job is
# decided on this hash of the full DAG id instead (the UI's Training jobs page).
DAG_KEY_LABEL = f"{LABEL_PREFIX}/dag-key"
# A task instance inside an Airflow 3.4 Task Loop: every iteration has the same dag, task, run and map
# index (and try 1), so the loop's region (Airflow's id of that execution of the loop, or of the mapped
# expansion inside one iteration) and the index within it are part of its identity; the iteration is for
# people (kubectl -l). Only looped jobs carry these: outside a loop the labels are what they always were.
REGION_ID_LABEL = f"{LABEL_PREFIX}/region-id"
REGION_INDEX_LABEL = f"{LABEL_PREFIX}/region-index"
LOOP_ITERATION_LABEL = f"{LABEL_PREFIX}/loop-iteration"


@dataclass(frozen=True)
class LoopRegion:
    """Where a task instance inside a Task Loop (Airflow >= 3.4) runs: the task instance's ``region_id``
    and ``region_index`` (Airflow's own coordinates of it, unique in the run with dag, task and map index)
    and ``context["loop"].index``, the iteration."""

    region_id: str
    region_index: int
    iteration: int

    def key_fields(self) -> tuple[str, ...]:
        """What the ownership key hashes beside the task instance (the iteration is in ``region_index`` or,
        for a task mapped inside an iteration, in ``region_id``, which is that iteration's expansion)."""
        return ("loop", self.region_id, str(self.region_index))


def to_dns1035(text: str) -> str:
    """Turn arbitrary text (a task id, say) into the start of a DNS-1035 label."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)
    if not name or not name[0].isalpha():
        name = f"job-{name}".rstrip("-")
    return name


def random_suffix(length: int = SUFFIX_LENGTH) -> str:
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


def generate_job_name(base: str, max_length: int = MAX_NAME_LENGTH, suffix: str | None = None) -> str:
    """``<base>-<random suffix>``, cut so the whole name fits ``max_length`` and stays DNS-1035."""
    suffix = suffix or random_suffix()
    room = max_length - len(suffix) - 1
    if room < 1:
        raise ValueError(f"max_length {max_length} leaves no room for a name before the suffix")
    stem = to_dns1035(base)[:room].rstrip("-") or "job"
    return f"{stem}-{suffix}"


def sanitize_label_value(value: object) -> str:
    """Make ``value`` a valid label value: at most 63 of ``[A-Za-z0-9_.-]``, alphanumeric at both ends."""
    text = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(value))[:MAX_NAME_LENGTH]
    text = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", text)
    return text


def _digest(*fields: str) -> str:
    return hashlib.sha256("\x1f".join(fields).encode()).hexdigest()[:40]


def deployment_label_value(deployment_id: str) -> str:
    """The ``DEPLOYMENT_LABEL`` value of a deployment id: a hash, so any id fits and none is cut."""
    return _digest("disttrain-deployment", deployment_id)


def resolve_deployment_id(deployment_id: str | None) -> str:
    """``deployment_id``, or this Airflow's (``deployment.deployment_id()``) when None."""
    if deployment_id is not None:
        return deployment_id
    from airflow_provider_disttrain.ownership.deployment import deployment_id as this_deployment

    return this_deployment()


def task_instance_key(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int | None,
    deployment_id: str | None = None,
    loop: LoopRegion | None = None,
) -> str:
    """Stable short hash of one task instance of one Airflow deployment (all its tries share it).

    ``deployment_id``: the deployment's id; None for this Airflow's (``deployment.deployment_id()``,
    read from the configuration). Two deployments running the same DAG get different keys. ``loop``: where
    in a Task Loop the instance runs (None outside one: the key is the one every earlier release made).
    """
    map_index = -1 if map_index is None else map_index  # the SDK types it Optional; unmapped is -1
    in_loop = loop.key_fields() if loop is not None else ()
    # A leading tag keeps these keys apart from the legacy ones, whose first field is the dag id.
    return _digest(
        "deployment", resolve_deployment_id(deployment_id), dag_id, task_id, run_id, str(map_index), *in_loop
    )


def legacy_task_instance_key(
    dag_id: str, task_id: str, run_id: str, map_index: int | None, loop: LoopRegion | None = None
) -> str:
    """The key of jobs made before the deployment was part of it (they carry no ``DEPLOYMENT_LABEL``):
    the same for every deployment, so it is only trusted on jobs without that label. No release before
    the deployment label ran in a loop: a looped instance's legacy key (with ``loop``) matches no job."""
    map_index = -1 if map_index is None else map_index
    return _digest(dag_id, task_id, run_id, str(map_index), *(loop.key_fields() if loop is not None else ()))


def dag_key(dag_id: str) -> str:
    """Stable short hash of one DAG id, whole (a label value: 40 hex digits)."""
    return hashlib.sha256(dag_id.encode()).hexdigest()[:40]


def task_instance_labels(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int | None,
    try_number: int,
    deployment_id: str | None = None,
    loop: LoopRegion | None = None,
) -> dict[str, str]:
    """The labels of a job of this task instance; ``deployment_id`` and ``loop`` as in ``task_instance_key``."""
    map_index = -1 if map_index is None else map_index
    deployment = resolve_deployment_id(deployment_id)
    labels = {
        DAG_ID_LABEL: sanitize_label_value(dag_id),
        TASK_ID_LABEL: sanitize_label_value(task_id),
        RUN_ID_LABEL: sanitize_label_value(run_id),
        MAP_INDEX_LABEL: sanitize_label_value(map_index),
        TRY_NUMBER_LABEL: sanitize_label_value(try_number),
        TASK_INSTANCE_LABEL: task_instance_key(dag_id, task_id, run_id, map_index, deployment, loop),
        DEPLOYMENT_LABEL: deployment_label_value(deployment),
    }
    labels[DAG_KEY_LABEL] = dag_key(dag_id)
    if loop is not None:
        # Exact values (a UUID and two integers fit a label value as they are): the cleanup and the UI
        # recompute the key from them, and the key, not these, decides whose the job is.
        labels[REGION_ID_LABEL] = loop.region_id
        labels[REGION_INDEX_LABEL] = str(loop.region_index)
        labels[LOOP_ITERATION_LABEL] = str(loop.iteration)
    if map_index < 0:
        # An unmapped task (map_index -1): "-1" is no valid label value and sanitizing it gives "1",
        # which would claim map index 1. Like the cncf pod operator, leave the label off.
        del labels[MAP_INDEX_LABEL]
    return labels


# The full ids, in annotations (no length or alphabet limit): the labels above are sanitized and cut to
# 63 characters, so a dag id of 64 characters, with a leading "_" or a non-ASCII letter cannot be read
# back from them. The orphan cleanup reads these first (``orphans.job_owner``); the task-instance hash
# still decides whose job it is. Annotation keys may share the label keys' names.
DAG_ID_ANNOTATION = f"{LABEL_PREFIX}/dag-id"
TASK_ID_ANNOTATION = f"{LABEL_PREFIX}/task-id"
# "false" on a job its submitting task does not wait for (wait_for_completion=False): that task ends
# once the job is created, so its ending says nothing about whether anyone still needs the job.
WAIT_FOR_COMPLETION_ANNOTATION = f"{LABEL_PREFIX}/wait-for-completion"


def task_instance_annotations(dag_id: str, task_id: str, *, wait_for_completion: bool) -> dict[str, str]:
    """The annotations the operators put on every job beside ``task_instance_labels``."""
    return {
        DAG_ID_ANNOTATION: dag_id,
        TASK_ID_ANNOTATION: task_id,
        WAIT_FOR_COMPLETION_ANNOTATION: "true" if wait_for_completion else "false",
    }


def loop_region_of(labels: Mapping[str, str]) -> LoopRegion | None:
    """The ``LoopRegion`` a looped job's labels name; None for a job made outside a loop (or unreadable
    labels, which then match no looped instance's key)."""
    region_id, index = labels.get(REGION_ID_LABEL), labels.get(REGION_INDEX_LABEL) or ""
    iteration = labels.get(LOOP_ITERATION_LABEL) or ""
    if not region_id or not index.isdigit():
        return None
    return LoopRegion(region_id, int(index), int(iteration) if iteration.isdigit() else -1)


def label_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
