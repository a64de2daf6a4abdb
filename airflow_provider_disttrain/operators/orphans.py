"""A maintenance task for platform teams: delete training jobs whose Airflow task instance has ended.

A task whose ``on_kill`` never ran (worker SIGKILLed, node lost) with no retry left leaves its job
running. Scheduled every hour or so (``example_dags/orphaned_job_cleanup.py``), this operator finds
such jobs by the labels the provider's operators put on every job and deletes them after a grace
period. It reads task instance states through Airflow's execution API, as any Airflow 3 task must
(``RuntimeTaskInstance.get_task_states``: tasks never touch the metadata database), and never touches
a job whose task instance is running, deferred or may still retry. Which job gets what is decided in
``airflow_provider_disttrain.ownership.orphans``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_provider_disttrain.hooks.api_errors import api_status, describe_error, means_job_absent
from airflow_provider_disttrain.job.kinds import JOB_KINDS, get_job_kind
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.manifest.validation import validate_namespace
from airflow_provider_disttrain.operators.cluster_hook import ClusterConnectionMixin
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.ownership.orphans import (
    KEPT_FINISHED,
    ORPHANED_SINCE_ANNOTATION,
    Action,
    Verdict,
    find_task_instance,
    job_owner,
    judge,
    needs_judging,
)
from airflow_provider_disttrain.utils.clock import SYSTEM, Clock

if TYPE_CHECKING:
    from airflow.sdk import Context

DEFAULT_GRACE_PERIOD = timedelta(minutes=30)
# The keys of the returned report, one list of jobs per action that changes a job (kept jobs are counted).
REPORT_KEYS = {Action.DELETE: "deleted", Action.MARK: "marked", Action.UNMARK: "unmarked"}
TaskStates = Mapping[str, Mapping[str, "str | None"]]


def parse_grace_period(value: timedelta | float | str) -> timedelta:
    """A timedelta, or seconds (a number, or the string a template renders)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"grace_period: expected a timedelta or seconds, got {value!r}") from None
    if not seconds >= 0:  # also refuses NaN
        raise ValueError(f"grace_period: must be zero or more seconds, got {value!r}")
    return timedelta(seconds=seconds)


def parse_flag(field: str, value: bool | str) -> bool:
    """A bool, or the string a template renders (``True``/``false``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{field}: expected true or false, got {value!r}")


class DeleteOrphanedTrainingJobsOperator(ClusterConnectionMixin, BaseOperator):
    """Delete the unfinished training jobs of one namespace whose task instance has ended.

    A job is deleted when it carries the provider's task-instance labels, has not finished, and its
    task instance is success, failed, skipped, upstream_failed or removed (no try will come back for
    it) for at least ``grace_period``. The first run that finds a job orphaned marks it (annotation
    ``disttrain.airflow.apache.org/orphaned-since``); a later run deletes it once the grace period has
    passed, unless its task instance became active again meanwhile (someone cleared it). Finished jobs
    are left to ``delete_on_finish`` and the TTL, jobs submitted with ``wait_for_completion=False``
    (their task ends once they exist; a sensor or a person waits for them) are kept, and so are jobs
    whose task instance this Airflow does not know (another deployment's, or their DAG run deleted).
    A job deleted or replaced between the LIST and its mark or delete (404, 409) is reported under
    ``errors`` and the run goes on. Returns and logs each job it marked, unmarked or deleted, and why,
    and how many jobs it kept for each reason (``kept``: counts, not jobs).

    :param namespace: the namespace to clean (templated; default: the connection's, else ``default``).
    :param kinds: job kinds to look at (default: every kind of the kinds table whose CRD is installed).
    :param grace_period: how long a job stays orphaned before it is deleted (a timedelta, or seconds;
        templated); 0 deletes in the run that finds it.
    :param report_only: a dry run: only report what would be marked and deleted, change nothing
        (templated; not called ``dry_run``, which is a method of every ``BaseOperator``).
    :param kubernetes_conn_id: the cncf.kubernetes connection.
    :param cluster_context: kubeconfig context overriding the connection's.
    :param config_file: kubeconfig file overriding the connection's.
    """

    template_fields: Sequence[str] = ("namespace", "grace_period", "report_only", "config_file", "cluster_context")
    ui_color = "#f1f3f4"

    def __init__(
        self,
        *,
        namespace: str | None = None,
        kinds: Sequence[str] | None = None,
        grace_period: timedelta | float | str = DEFAULT_GRACE_PERIOD,
        report_only: bool | str = False,
        kubernetes_conn_id: str = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.namespace = namespace
        self.kinds = [get_job_kind(kind).kind for kind in (kinds if kinds is not None else JOB_KINDS)]
        self.grace_period = grace_period
        self.report_only = report_only
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.clock: Clock = SYSTEM

    def execute(self, context: Context) -> dict[str, Any]:
        grace_period = parse_grace_period(self.grace_period)
        report_only = parse_flag("report_only", self.report_only)
        namespace = self.namespace or self.hook.default_namespace()
        validate_namespace(namespace)
        task_states = _TaskStatesOnce(context["ti"].get_task_states)
        now = datetime.fromtimestamp(self.clock.wall(), timezone.utc)
        report = _Report(namespace, report_only)
        try:
            for kind in self.kinds:
                for seen in self._jobs_to_judge(kind, namespace, report):
                    job = seen.job or {}
                    owner = job_owner(job)
                    assert owner is not None  # _jobs_to_judge keeps only these
                    task_instance = find_task_instance(owner, task_states(owner.dag_id, owner.task_id))
                    verdict = judge(seen, task_instance, now, grace_period)
                    entry = {
                        "kind": kind,
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"].get("uid"),
                        "dag_id": owner.dag_id,
                        "task_id": owner.task_id,
                        "map_index": owner.map_index,
                        "run_id": task_instance[0] if task_instance else None,
                        "task_state": task_instance[1] if task_instance else None,
                        "reason": verdict.reason,
                    }
                    if verdict.action is Action.KEEP:
                        report.keep(verdict.kept_because or verdict.reason)
                        self.log.debug("keep %s %s/%s: %s", kind, namespace, entry["name"], verdict.reason)
                        continue
                    would = "would " if report_only else ""
                    self.log.info(
                        "%s%s %s %s/%s: %s", would, verdict.action.value, kind, namespace, entry["name"], verdict.reason
                    )
                    error = None if report_only else self._apply(kind, namespace, job, verdict, now)
                    if error is None:
                        report.changed(verdict.action, entry)
                    else:
                        self.log.warning("%s %s %s/%s: %s", verdict.action.value, kind, namespace, entry["name"], error)
                        report.failed(verdict.action, entry, error)
        finally:
            # Also when a request failed for good: the log says what this run had done by then.
            self.log.info("%s", report.summary())
        return report.as_xcom()

    def _jobs_to_judge(self, kind: str, namespace: str, report: _Report) -> list[JobView]:
        """The labelled jobs of ``kind`` that ``judge`` may do something with, listed page by page.

        The finished ones without a mark are counted as kept on the way (``needs_judging``): only the
        unfinished jobs, which the cluster's capacity bounds, are held until they are judged.
        """
        # Presence of the task-instance label (an "exists" selector): the API server filters out jobs
        # the provider did not create; job_owner checks that the rest name their task instance.
        candidates: list[JobView] = []
        try:
            for page in self.hook.job_pages(kind, namespace, TASK_INSTANCE_LABEL):
                for job in page:
                    if job_owner(job) is None:
                        continue
                    if needs_judging(seen := JobView.of(job)):  # the one look at the job this run takes
                        candidates.append(seen)
                    else:
                        report.keep(KEPT_FINISHED)
        except Exception as error:
            if api_status(error) != 404:
                raise
            self.log.info("%s is not installed in the cluster (404 on its list): skipped", kind)
            return []
        return candidates

    def _apply(self, kind: str, namespace: str, job: Mapping[str, Any], verdict: Verdict, now: datetime) -> str | None:
        """Do what the verdict says; the reason it could not be done to this job (404, 409), else None.

        A job deleted or replaced under its name since the LIST is no longer this verdict's: it is
        reported, and the run goes on with the other jobs. Every other error is raised.
        """
        name, uid = job["metadata"]["name"], job["metadata"].get("uid")
        try:
            if verdict.action is Action.DELETE:
                # The uid precondition leaves alone a job of the same name created since.
                if not self.hook.delete_job(kind, name, namespace, uid=uid):
                    return "already gone, or its name now holds another job (404/409 on the delete)"
            elif verdict.action in (Action.MARK, Action.UNMARK):
                mark = now.isoformat() if verdict.action is Action.MARK else None  # null removes it (merge patch)
                metadata: dict[str, Any] = {"annotations": {ORPHANED_SINCE_ANNOTATION: mark}}
                if uid:
                    # A uid in a patch is a precondition too: a new job of the same name answers 409.
                    metadata["uid"] = uid
                self.hook.patch_job(kind, name, namespace, {"metadata": metadata})
        except Exception as error:
            if means_job_absent(error, uid_precondition=True):
                return f"already gone, or its name now holds another job ({describe_error(error)})"
            raise
        return None


class _Report:
    """What a cleanup run changed, job by job, and how many jobs it kept and why (counts only: the jobs
    kept are most of a namespace's history, and the report is an XCom and a log line every run)."""

    def __init__(self, namespace: str, report_only: bool) -> None:
        self.namespace = namespace
        self.report_only = report_only
        self.jobs: dict[str, list[dict[str, Any]]] = {key: [] for key in REPORT_KEYS.values()}
        self.errors: list[dict[str, Any]] = []
        self.kept: Counter[str] = Counter()

    def keep(self, because: str) -> None:
        self.kept[because] += 1

    def changed(self, action: Action, entry: dict[str, Any]) -> None:
        self.jobs[REPORT_KEYS[action]].append(entry)

    def failed(self, action: Action, entry: dict[str, Any], error: str) -> None:
        self.errors.append({**entry, "action": action.value, "error": error})

    def summary(self) -> str:
        counts = ", ".join(f"{len(jobs)} {key}" for key, jobs in self.jobs.items())
        kept = "; ".join(f"{count} {because}" for because, count in self.kept.most_common())
        return (
            f"{'report only: ' if self.report_only else ''}{counts}, {len(self.errors)} not done (gone or replaced), "
            f"{sum(self.kept.values())} kept in {self.namespace}{f' ({kept})' if kept else ''}"
        )

    def as_xcom(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "report_only": self.report_only,
            **self.jobs,
            "errors": self.errors,
            "kept": dict(self.kept.most_common()),
        }


class _TaskStatesOnce:
    """One ``get_task_states`` request per (DAG, task) and cleanup run, whatever the number of jobs."""

    def __init__(self, get_task_states: Callable[..., TaskStates]) -> None:
        self._get = get_task_states
        self._answers: dict[tuple[str, str], TaskStates] = {}

    def __call__(self, dag_id: str, task_id: str) -> TaskStates:
        if (dag_id, task_id) not in self._answers:
            self._answers[(dag_id, task_id)] = self._get(dag_id=dag_id, task_ids=[task_id])
        return self._answers[(dag_id, task_id)]
