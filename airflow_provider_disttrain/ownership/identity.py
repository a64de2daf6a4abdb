"""Which job is this task instance's: the bookkeeping that keeps a retry from training twice.

A job belongs to the task instance whose labels it carries (``naming.task_instance_labels``: the same
Airflow deployment, DAG, task, run and map index, and inside an Airflow 3.4 Task Loop the same loop
region and iteration; every try of the instance shares them). That one
test, ``owns``, decides everywhere: whether a retry takes a job over, whether an explicit ``job_name``
that exists may be reattached, whether a name found in XCom still holds this instance's job. A job
made before the deployment was part of the labels (no ``naming.DEPLOYMENT_LABEL``) is recognised by the
legacy key, so that a retry after an upgrade still finds it; a job of another deployment never is.

Labels can be copied (``kubectl get -o yaml | edit | apply``), so where this task instance recorded
the uid of its job (the state store), only that uid is taken over, settled or deleted.

Where the identity is kept, in the order a new try looks:

* the task state store (``STATE_STORE_KEY``): kind, name, namespace and uid of the job a try
  submitted, when it submitted it (the worker's clock, for the deadlines), and once known its
  result, so a retry after the job succeeded and was deleted returns that result;
* the job's labels: a running job of this instance, found by label (a try that died before
  writing the store entry);
* XCom (``job_name``/``job_namespace``): how the scheduler's deferral timeout, which resumes a task
  whose trigger never reported, finds the job to delete.

``JobIdentity`` is the thin I/O layer over the hook; ``owns`` and ``describe_owner`` are pure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_provider_disttrain.exceptions import JobAlreadyExistsError
from airflow_provider_disttrain.job.outcome import ERROR, JobRef, Outcome
from airflow_provider_disttrain.job.status import JobState
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.ownership.naming import (
    DAG_ID_LABEL,
    DEPLOYMENT_LABEL,
    LOOP_ITERATION_LABEL,
    MAP_INDEX_LABEL,
    RUN_ID_LABEL,
    TASK_ID_LABEL,
    TASK_INSTANCE_LABEL,
    LoopRegion,
    deployment_label_value,
    legacy_task_instance_key,
    resolve_deployment_id,
    task_instance_key,
)


class JobStore(Protocol):
    """The four calls ``JobIdentity`` makes of the cluster, as ``hooks/training_job.TrainingJobHook``
    answers them. Named here so that ownership/ stands below hooks/: the hook imports the labels
    (``naming``), and this module imports nothing of the hooks."""

    def get_job(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None: ...

    def find_jobs(self, kind: str, namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]: ...

    def create_job(self, kind: str, manifest: Mapping[str, Any], namespace: str) -> dict[str, Any]: ...

    def delete_and_wait(self, kind: str, name: str, namespace: str, *, uid: str | None = None) -> bool: ...


STATE_STORE_KEY = "disttrain_job"


def _labels(job: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((job or {}).get("metadata") or {}).get("labels") or {}


@dataclass(frozen=True)
class TaskInstanceKeys:
    """What a job of one task instance of this deployment carries: ``task_instance_key``
    (``TASK_INSTANCE_LABEL``) and ``deployment`` (``DEPLOYMENT_LABEL``); ``legacy_task_instance_key`` is the
    key of its jobs made before the
    deployment label existed."""

    task_instance_key: str
    legacy_task_instance_key: str
    deployment: str

    @classmethod
    def of(
        cls,
        dag_id: str,
        task_id: str,
        run_id: str,
        map_index: int | None,
        deployment_id: str | None = None,
        loop: LoopRegion | None = None,
    ) -> TaskInstanceKeys:
        """The keys of a task instance; ``deployment_id`` None: this Airflow's; ``loop`` None: not in a loop."""
        deployment_id = resolve_deployment_id(deployment_id)
        return cls(
            task_instance_key(dag_id, task_id, run_id, map_index, deployment_id, loop),
            legacy_task_instance_key(dag_id, task_id, run_id, map_index, loop),
            deployment_label_value(deployment_id),
        )


def owns(job: Mapping[str, Any] | None, keys: TaskInstanceKeys) -> bool:
    """Whether ``job`` is the task instance's whose keys are ``keys``, in this deployment.

    A job with a deployment label must carry this deployment's and the key that includes it; a job
    without one (made by a release before it) is matched on the legacy key, as it always was.
    """
    if job is None:
        return False
    labels = _labels(job)
    if DEPLOYMENT_LABEL in labels:
        return labels[DEPLOYMENT_LABEL] == keys.deployment and labels.get(TASK_INSTANCE_LABEL) == keys.task_instance_key
    return labels.get(TASK_INSTANCE_LABEL) == keys.legacy_task_instance_key


def describe_owner(job: Mapping[str, Any]) -> str:
    """Who the job belongs to, in the words of its labels (for an error that names the other owner)."""
    labels = _labels(job)
    if TASK_INSTANCE_LABEL not in labels:
        return "no Airflow task of this provider (it carries no task-instance label)"
    parts = [
        f"{what} {labels[label]!r}"
        for what, label in (("DAG", DAG_ID_LABEL), ("task", TASK_ID_LABEL), ("run", RUN_ID_LABEL))
        if label in labels
    ]
    parts.append(f"map index {labels[MAP_INDEX_LABEL]}" if MAP_INDEX_LABEL in labels else "unmapped")
    if LOOP_ITERATION_LABEL in labels:
        parts.append(f"loop iteration {labels[LOOP_ITERATION_LABEL]}")
    if DEPLOYMENT_LABEL in labels:
        parts.append(f"Airflow deployment {labels[DEPLOYMENT_LABEL]!r} (a hash of its deployment_id)")
    return "the task instance of " + ", ".join(parts)


def _gone_or_going(job: Mapping[str, Any] | None, uid: str | None) -> bool:
    metadata = (job or {}).get("metadata") or {}
    return job is None or metadata.get("uid") != uid or bool(metadata.get("deletionTimestamp"))


class JobIdentity:
    """The job identity of one task instance: its state store entry, its labels, its XComs.

    ``store`` is the context's ``task_state_store`` (None where Airflow has none); ``task_instance_keys``
    the instance's keys (``task_instance_keys_of``).
    """

    def __init__(
        self,
        hook: JobStore,
        kind: str,
        task_instance_keys: TaskInstanceKeys,
        store: Any,
        log: logging.Logger | Any,
        *,
        try_number: int | None = None,
    ) -> None:
        self.hook = hook
        self.kind = kind
        self.task_instance_keys = task_instance_keys
        self.store = store
        self.log = log
        self.try_number = try_number

    # -- the state store entry --------------------------------------------------------------------

    def retried_entry(self) -> dict[str, Any] | None:
        """What an earlier try of this task instance saved, unless that try ended in the task's success.

        A run after a successful one can only be a user's deliberate clear (a retry follows a failure),
        which asks for a new training: the saved job is not this run's to take over.
        """
        saved = self.store.get(STATE_STORE_KEY) if self.store is not None else None
        return dict(saved) if isinstance(saved, dict) and not saved.get("task_succeeded") else None

    def remember(self, ref: JobRef | None, **fields: Any) -> None:
        """Add ``fields`` to the entry for ``ref`` (a new entry when ``ref`` is another job); no-op without a store."""
        if self.store is None:
            return
        saved = self.store.get(STATE_STORE_KEY)
        entry: dict[str, Any] = dict(saved) if isinstance(saved, dict) else {}
        if ref is not None and entry.get("uid") != ref.uid:
            entry = {"kind": ref.kind, "name": ref.name, "namespace": ref.namespace, "uid": ref.uid}
        self.store.set(STATE_STORE_KEY, {**entry, **fields})

    def recorded_uid(self, name: str | None = None, namespace: str | None = None) -> str | None:
        """The uid of the job a try of this instance recorded (of that name and namespace, if given)."""
        saved = self.store.get(STATE_STORE_KEY) if self.store is not None else None
        if not isinstance(saved, dict) or not saved.get("uid"):
            return None
        if name is not None and (saved.get("kind"), saved.get("name"), saved.get("namespace")) != (
            self.kind,
            name,
            namespace,
        ):
            return None
        return str(saved["uid"])

    def recorded(self, ref: JobRef, key: str) -> Any:
        """What a try of this instance recorded under ``key`` for the job ``ref`` (that uid), else None."""
        saved = self.store.get(STATE_STORE_KEY) if self.store is not None else None
        return saved.get(key) if isinstance(saved, dict) and saved.get("uid") == ref.uid else None

    def submitted_at(self, ref: JobRef) -> float | None:
        """When (worker's clock) a try of this instance submitted the job ``ref`` names, if one recorded it."""
        saved = self.store.get(STATE_STORE_KEY) if self.store is not None else None
        if isinstance(saved, dict) and saved.get("uid") == ref.uid and saved.get("submitted_at") is not None:
            return float(saved["submitted_at"])
        return None

    def earlier_try_result(self) -> dict[str, Any] | None:
        """The saved result of a job an earlier try saw succeed and that no longer exists."""
        saved = self.retried_entry()
        if not saved or not saved.get("result"):
            return None
        job = self.hook.get_job(saved["kind"], saved["name"], saved["namespace"])
        if job is not None and job["metadata"].get("uid") == saved.get("uid"):
            return None  # still there: taken over as a job, so the rest of the ending (cleanup) runs
        return dict(saved["result"])

    # -- finding or creating the job --------------------------------------------------------------

    def earlier_try_job(self, namespace: str) -> dict[str, Any] | None:
        """A job an earlier try of this task instance created: running, or (per the store) succeeded."""
        if saved := self.retried_entry():
            job = self.hook.get_job(saved["kind"], saved["name"], saved["namespace"])
            if (
                job is not None
                and not _gone_or_going(job, saved.get("uid"))
                and JobView.of(job).state is not JobState.FAILED
            ):
                return job
            if saved.get("uid"):
                return None  # the recorded job, the only one a label search below could accept, is not running
        # A try records the uid of the job it created: a running job that carries this instance's labels
        # under another uid is a copy (or a job of a try that died between its create and its record),
        # not the job a try of this instance is waiting for.
        recorded = self.recorded_uid()
        running = [
            job
            for job in self._labelled_jobs(namespace)
            if not JobView.of(job).is_terminal
            and not job["metadata"].get("deletionTimestamp")
            and (recorded is None or job["metadata"].get("uid") == recorded)
        ]
        return running[-1] if running else None

    def _labelled_jobs(self, namespace: str) -> list[dict[str, Any]]:
        """This instance's jobs found by label: this deployment's, else those made before the deployment
        label existed (only jobs without one: another deployment's share the legacy key)."""
        keys = self.task_instance_keys
        found = self.hook.find_jobs(self.kind, namespace, {TASK_INSTANCE_LABEL: keys.task_instance_key})
        # A first try has no earlier one whose job it could find, least of all one made by an older release:
        # the legacy LIST is spent only on later tries (and where the try is unknown).
        if not (ours := [job for job in found if owns(job, keys)]) and self.try_number != 1:
            legacy = self.hook.find_jobs(self.kind, namespace, {TASK_INSTANCE_LABEL: keys.legacy_task_instance_key})
            ours = [job for job in legacy if owns(job, keys)]
        return ours

    def claim(
        self, manifest: Mapping[str, Any], *, explicit_name: bool, if_exists: str, submitted_at: float
    ) -> tuple[dict[str, Any], bool]:
        """This instance's job for ``manifest``: taken over from an earlier try, or created. Returns
        ``(job, reattached)``.

        With an explicit name that exists already: a job of this instance is reattached while it runs
        (``if_exists="reattach"``) or replaced (an earlier try's finished job: the retry asked for);
        another owner's job is replaced only with ``if_exists="replace"``, else refused, naming it.
        """
        metadata = manifest["metadata"]
        name, namespace = metadata["name"], metadata["namespace"]
        if existing := self.earlier_try_job(namespace):
            return existing, True
        if explicit_name and (current := self.hook.get_job(self.kind, name, namespace)):
            recorded = self.recorded_uid(name, namespace)
            # Carrying this instance's labels is not enough where a try recorded another uid under the name.
            ours = owns(current, self.task_instance_keys) and recorded in (None, current["metadata"].get("uid"))
            seen = JobView.of(current)  # the one look at the job under the name
            if if_exists == "reattach" and ours and not seen.is_terminal:
                return current, True
            if not ours and if_exists != "replace":
                whose = (
                    f"carries this task instance's labels but is not the job it recorded (uid "
                    f"{current['metadata'].get('uid')}, recorded {recorded}): a copy, or another's"
                    if owns(current, self.task_instance_keys)
                    else f"belongs to {describe_owner(current)}, not to this task instance"
                )
                raise JobAlreadyExistsError(
                    f"{self.kind} {namespace}/{name} already exists and {whose} (if_exists={if_exists!r} never "
                    "takes over another's job; if_exists='replace' deletes it and submits this task's)"
                )
            self.log.info("Replacing %s %s/%s (%s)", self.kind, namespace, name, seen.describe())
            current_metadata = current["metadata"]
            self.hook.delete_and_wait(self.kind, name, namespace, uid=current_metadata.get("uid"))
        try:
            job = self.hook.create_job(self.kind, manifest, namespace)
        except JobAlreadyExistsError:
            # A create whose reply was lost and was retried, or a race with another try of this task.
            job = self.hook.get_job(self.kind, name, namespace)  # type: ignore[assignment]
            if not owns(job, self.task_instance_keys):
                raise
        self.remember(JobRef(self.kind, name, namespace, job["metadata"].get("uid")), submitted_at=submitted_at)
        return job, False

    def vanished(self, ref: JobRef) -> bool:
        """Whether the job ``ref`` pins is deleted, being deleted, or replaced by another under its name."""
        return _gone_or_going(self.hook.get_job(ref.kind, ref.name, ref.namespace), ref.uid)

    def taken_over_job_vanished(self, ref: JobRef, outcome: Outcome) -> bool:
        """Whether the job this try took over from an earlier one is gone, so a fresh one must be submitted.

        Clearing a deferred task starts the new try at once and the old try's trigger deletes the job
        (``on_kill``) a moment later: the new try may have taken that job over already. The user asked
        for the task to run again, so it does, rather than failing on the earlier try's cleanup.
        """
        if outcome.status != ERROR or not self.vanished(ref):
            return False
        self.log.warning(
            "%s, which this try took over from an earlier one, was deleted (the earlier try's cleanup, "
            "e.g. after the task was cleared): submitting a fresh job",
            ref.title,
        )
        return True

    # -- XCom -------------------------------------------------------------------------------------

    def own_job_from_xcom(self, ti: Any) -> dict[str, Any] | None:
        """The job this task instance created, named in its XComs; None if that name now holds another's job."""
        name = ti.xcom_pull(task_ids=ti.task_id, key="job_name", map_indexes=ti.map_index)
        namespace = ti.xcom_pull(task_ids=ti.task_id, key="job_namespace", map_indexes=ti.map_index)
        job = self.own_job(name, namespace) if name and namespace else None
        # The store recorded the uid before XCom named the job: another job under that name since (a
        # copy carrying the same labels) is not this instance's to delete.
        recorded = self.recorded_uid(name, namespace) if job is not None else None
        return None if job is None or recorded not in (None, job["metadata"].get("uid")) else job

    def own_job(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The job of that name, if it is this task instance's (carries its label); else None."""
        job = self.hook.get_job(self.kind, name, namespace)
        return job if owns(job, self.task_instance_keys) else None

    @staticmethod
    def publish(ti: Any, ref: JobRef) -> None:
        """Name the job in XCom (``job_name``, ``job_namespace``): downstream tasks and the deferral timeout read it."""
        ti.xcom_push(key="job_name", value=ref.name)
        ti.xcom_push(key="job_namespace", value=ref.namespace)


def loop_region(ti: Any, context: Mapping[str, Any] | None) -> LoopRegion | None:
    """Where in a Task Loop the task instance runs; None outside a loop and on Airflow before 3.4.

    Airflow 3.4 puts ``loop`` into the context of a task inside a loop only, and gives every task
    instance ``region_id``/``region_index`` (also mapped ones outside loops, whose key must stay as it
    was): the loop in the context decides, the task instance's coordinates say where.
    """
    loop = context.get("loop") if context is not None else None
    if loop is None:
        return None
    iteration = int(loop.index)
    region_id, region_index = getattr(ti, "region_id", None), getattr(ti, "region_index", None)
    return LoopRegion(
        str(region_id) if region_id is not None else "",
        int(region_index) if region_index is not None else iteration,
        iteration,
    )


def task_instance_keys_of(ti: Any, context: Mapping[str, Any] | None = None) -> TaskInstanceKeys:
    """The keys of an Airflow task instance in this deployment (``context``: its task context, for the loop)."""
    return TaskInstanceKeys.of(ti.dag_id, ti.task_id, ti.run_id, ti.map_index, loop=loop_region(ti, context))
