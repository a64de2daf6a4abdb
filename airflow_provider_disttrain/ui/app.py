"""The FastAPI app behind the UI: JSON endpoints behind Airflow's authentication, and the two pages.

Imported by the API server only (``plugin`` hands it over lazily). A thin I/O layer: it reads the
jobs through the provider's hook and the shared ``JobListCache``, asks Airflow's auth manager what
the user may read, and leaves what is shown to ``view``.

Settings (``[disttrain]``): ``ui_conn_id`` the ``kubernetes`` connection the API server reads jobs
with (default ``kubernetes_default``), ``ui_namespaces`` the namespaces the page lists (comma
separated; default the connection's namespace), ``ui_kinds`` the job kinds it lists (default
``PyTorchJob,MPIJob,TrainJob``), ``ui_cache_seconds`` how long one LIST serves everyone (default 5),
``ui_cache_dir`` where the API server's worker processes share their LISTs (default
``$AIRFLOW_HOME/disttrain-ui-cache``; ``none``: each worker lists for itself), ``ui_request_timeout``
how long one request of the pages may wait for the cluster, its calls and its wait for another
request's LIST together (default 10 s; past it the last good LIST, or 504).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.configuration import AIRFLOW_HOME, conf
from airflow.models.dag import DagModel
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy import select

from airflow_provider_disttrain.failures.diagnostics import event_objects
from airflow_provider_disttrain.hooks.api_errors import api_status
from airflow_provider_disttrain.job.kinds import get_job_kind
from airflow_provider_disttrain.kueue.dispatch import WorkerClusters, dispatched_to, extra_worker_clusters
from airflow_provider_disttrain.kueue.hold import queue_name
from airflow_provider_disttrain.kueue.position import MalformedAnswer
from airflow_provider_disttrain.operators.links import CONFIG_SECTION
from airflow_provider_disttrain.ownership.naming import (
    TASK_INSTANCE_LABEL,
    LoopRegion,
    legacy_task_instance_key,
    task_instance_key,
)
from airflow_provider_disttrain.pods.logs import leader_pods
from airflow_provider_disttrain.ui import view, waits
from airflow_provider_disttrain.ui.bounded import DEFAULT_REQUEST_SECONDS, BoundedHook, Budget
from airflow_provider_disttrain.ui.history import MetricHistory
from airflow_provider_disttrain.ui.listing import DEFAULT_TTL_SECONDS, JobListCache, NoAnswer, SharedListStore
from airflow_provider_disttrain.ui.masking import masker

log = logging.getLogger(__name__)

DEFAULT_KINDS = "PyTorchJob,MPIJob,TrainJob"
# The task instances looked up to link the page's jobs to them (the newest first).
MAX_LINKED_TASK_INSTANCES = 5000
# The leader's log lines a tab shows (the full log is the task's).
LOG_TAIL_LINES = 20
LOG_TAIL_BYTES = 64_000


def _setting(option: str, fallback: str) -> str:
    return str(conf.get(CONFIG_SECTION, option, fallback=fallback) or fallback)


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _shared_store(name: str) -> SharedListStore | None:
    """Where this host's API-server workers share their LISTs; None (each lists for itself) if disabled
    or unusable, said once in the log."""
    directory = _setting("ui_cache_dir", str(Path(AIRFLOW_HOME) / "disttrain-ui-cache"))
    if directory.lower() == "none":
        return None
    try:
        return SharedListStore(Path(directory), name)
    except OSError as error:
        log.warning("The Training jobs UI's workers do not share their LISTs (%s): each lists for itself", error)
        return None


class Cluster:
    """The API server's view of the cluster: one hook, one cache of LISTs, the configured scope.

    What is cached (in memory, and in ``ui_cache_dir``) is what the view reads (``view.job_read``,
    ``pod_read``, ``event_read``: no env value, no command line), its messages already masked.
    """

    def __init__(self) -> None:
        self.request_seconds = float(_setting("ui_request_timeout", str(DEFAULT_REQUEST_SECONDS)))
        if not self.request_seconds > 0:
            raise ValueError(f"[disttrain] ui_request_timeout must be > 0 seconds, got {self.request_seconds!r}")
        self.budget = Budget()
        self.hook = BoundedHook(budget=self.budget, conn_id=_setting("ui_conn_id", "kubernetes_default"))
        self.kinds = [get_job_kind(kind).kind for kind in _csv(_setting("ui_kinds", DEFAULT_KINDS))]
        self.namespaces = _csv(_setting("ui_namespaces", "")) or [self.hook.default_namespace()]
        ttl = float(_setting("ui_cache_seconds", str(DEFAULT_TTL_SECONDS)))
        self.cache = JobListCache(self._list, ttl=ttl, store=_shared_store("jobs"))
        # A job's pods and Warning events, for its tab: keyed by "<kind>/<name>", as short-lived.
        self.pods_and_events = JobListCache(self._pods_and_events, ttl=ttl, store=_shared_store("pods"))
        # Kueue's Workloads ("workloads") and a LocalQueue's pending ones ("pending/<queue>"), for the waits.
        self.kueue = JobListCache(self._kueue, ttl=ttl, store=_shared_store("kueue"))
        # Each job's reported metrics over time (the tab's chart), fed by the jobs the requests read anyway.
        self.history = MetricHistory()
        # The hooks of the MultiKueue worker clusters the connection's extra maps: as many as it names.
        self._workers: dict[str, BoundedHook] = {}

    def _list(self, namespace: str, kind: str) -> list[dict[str, Any]]:
        try:
            jobs = self.hook.find_jobs(kind, namespace, {})
        except Exception as error:
            if api_status(error) == 404:  # the kind's CRD is not installed
                return []
            raise
        # Only the provider's jobs, and only what the view reads, masked with each job's own secrets.
        return [
            masker(job)(view.job_read(job))
            for job in jobs
            if TASK_INSTANCE_LABEL in ((job.get("metadata") or {}).get("labels") or {})
        ]

    def _pods_and_events(self, namespace: str, key: str) -> list[dict[str, Any]]:
        """``[{"pods": [...], "events": [...]}]`` of one job: its pods (one LIST), and the Warning events of
        the job and of its pods that have problems or do not run (one LIST each, at most MAX_EVENT_PODS)."""
        kind, name = key.split("/", 1)
        job = self.hook.get_job(kind, name, namespace) or {}
        cluster, reader = self._where_pods_run(namespace, job)
        pods = reader.list_job_pods(name, namespace, kind=kind) if reader is not None else []
        # The objects the task's failure explanation reads the events of (TrainingJobHook.collect_evidence).
        objects = event_objects(get_job_kind(kind), name, pods)
        events = reader.list_warning_events(namespace, objects) if reader is not None else []
        log_tail = self._log_tail(kind, pods, reader) if reader is not None else None
        # The job's secrets as the task's masker has them (its env), and its pods' (what their env got).
        mask = masker(job, pods)
        found = {"pods": [view.pod_read(pod) for pod in pods], "events": [view.event_read(e) for e in events]}
        return [mask({**found, "log": log_tail, "cluster": cluster})]

    def _kueue(self, namespace: str, key: str) -> list[dict[str, Any]]:
        """The namespace's Workloads, or a LocalQueue's pending Workloads; none when the connection may not
        read them or Kueue does not serve them (401/403/404/503): the page then shows no estimate."""
        try:
            if key == "workloads":
                return [waits.workload_read(w) for w in self.hook.list_workloads(namespace)]
            return waits.pending_read(self.hook.pending_workloads(namespace, key.removeprefix("pending/")))
        except Exception as error:
            if api_status(error) in (401, 403, 404, 503) or isinstance(error, MalformedAnswer):
                return []
            raise

    def waits(self, jobs: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        """The ``wait`` of each job Kueue holds (``ui.waits``), within the request's budget; none when the
        cluster does not answer in time (the rest of the page stands without them)."""
        try:
            return waits.job_waits(
                jobs,
                lambda namespace: self.kueue.jobs(namespace, "workloads", wait=self.budget.left()),
                lambda namespace, queue: self.kueue.jobs(namespace, f"pending/{queue}", wait=self.budget.left()),
                time.time(),
            )
        except Exception as error:
            log.info("The Training jobs UI shows no wait estimates this time: %s", error)
            return {}

    def _where_pods_run(self, namespace: str, job: dict[str, Any]) -> tuple[str | None, BoundedHook | None]:
        """The MultiKueue worker cluster a queued job was dispatched to (None: this cluster), and the hook its
        pods are read with: this cluster's, the worker's that the connection's extra ``worker_clusters`` maps
        (``kueue.dispatch``), or None (no connection maps it: the tab names the cluster and shows no pods)."""
        uid = (job.get("metadata") or {}).get("uid")
        if queue_name(job) is None or not uid:
            return None, self.hook
        try:
            cluster = dispatched_to(self.hook.find_workload(namespace, str(uid)))
            workers = extra_worker_clusters(self.hook.worker_clusters_extra(), self.hook.conn_id)
        except Exception as error:  # the tab stands without it, as without MultiKueue
            log.warning("Where the pods of %s/%s run could not be read: %s", namespace, uid, error)
            return None, self.hook
        if cluster is None:
            return None, self.hook
        conn_id = WorkerClusters(extra=workers).resolve(cluster).conn_id
        if conn_id is None:
            return cluster, None
        if conn_id not in self._workers:
            self._workers[conn_id] = BoundedHook(budget=self.budget, conn_id=conn_id)
        return cluster, self._workers[conn_id]

    def _log_tail(self, kind: str, pods: list[dict[str, Any]], reader: BoundedHook) -> dict[str, Any] | None:
        """The last lines of the leader's log (what the task's log already shows of it), once it started."""
        job_kind = get_job_kind(kind)
        started = [pod for pod in leader_pods(job_kind, pods) if (pod.get("status") or {}).get("phase") != "Pending"]
        if not started:
            return None
        pod = started[-1]
        metadata = pod["metadata"]
        try:
            text = reader.read_pod_log(
                metadata["name"],
                metadata["namespace"],
                job_kind.main_container_name(pod),
                tail_lines=LOG_TAIL_LINES,
                limit_bytes=LOG_TAIL_BYTES,
            )
        except Exception as error:  # the rest of the tab stands without the log (a node that serves none)
            return {"pod": metadata["name"], "lines": [], "error": f"the log could not be read: {error}"[:500]}
        return {"pod": metadata["name"], "lines": text.splitlines()[-LOG_TAIL_LINES:]}

    def jobs(self, namespaces: list[str]) -> list[dict[str, Any]]:
        """The jobs of ``namespaces``, each LIST waited for at most what is left of the request's budget."""
        found = [
            job
            for ns in dict.fromkeys(namespaces)
            for kind in self.kinds
            for job in self.cache.jobs(ns, kind, wait=self.budget.left())
        ]
        for job in found:
            self.history.record(job)
        return found


_cluster_lock = threading.Lock()


@cache
def _cluster() -> Cluster:
    return Cluster()


def cluster() -> Cluster:
    """The process's one ``Cluster`` (built once: concurrent first requests must share its cache)."""
    with _cluster_lock:
        return _cluster()


def _cluster_error(error: Exception) -> HTTPException:
    # The hook's errors name the request and the API server's reason, never the credentials.
    if isinstance(error, NoAnswer):
        return HTTPException(status_code=504, detail=f"reading the cluster timed out: {error}")
    return HTTPException(status_code=502, detail=f"reading the cluster failed: {error}")


def _job_namespace(session: Any, dag_id: str, run_id: str, task_id: str, map_index: int) -> str | None:
    """The namespace the task instance's ``job_namespace`` XCom names, if it pushed one."""
    query = XComModel.get_many(
        run_id=run_id, key="job_namespace", task_ids=task_id, dag_ids=dag_id, map_indexes=map_index
    )
    row = session.scalars(query.limit(1)).first()
    value = XComModel.deserialize_value(row) if row is not None else None
    return value if isinstance(value, str) and value else None


STATIC = resources.files("airflow_provider_disttrain.ui") / "static"


def _page(name: str) -> HTMLResponse:
    return HTMLResponse((STATIC / name).read_text())


def create_app() -> FastAPI:
    app = FastAPI(title="Distributed training", docs_url=None, redoc_url=None, openapi_url=None)
    # The pages' stylesheet and script (no data): served as files, like Airflow's own UI assets.
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    @app.get("/jobs", response_class=HTMLResponse)
    def jobs_page(user: GetUserDep) -> HTMLResponse:
        return _page("jobs.html")

    @app.get("/task-instance/{dag_id}/{run_id}/{task_id}/{map_index}", response_class=HTMLResponse)
    def task_instance_page(dag_id: str, user: GetUserDep) -> HTMLResponse:
        return _page("task_instance.html")

    @app.get(
        "/api/task-instance/{dag_id}/{run_id}/{task_id}",
        dependencies=[Depends(requires_access_dag(method="GET", access_entity=DagAccessEntity.TASK_INSTANCE))],
    )
    def task_instance_job(
        dag_id: str,
        run_id: str,
        task_id: str,
        session: SessionDep,
        map_index: Annotated[int, Query()] = -1,
        region_id: Annotated[str | None, Query()] = None,
        region_index: Annotated[int | None, Query()] = None,
    ) -> dict[str, Any]:
        # Airflow 3.4's UI names a task instance in a Task Loop by region_id and region_index (in its URL,
        # which the tab forwards): the iteration's own job, never the newest iteration's.
        loop = (
            LoopRegion(region_id, region_index, region_index)
            if region_id and region_index is not None and region_id != view.SENTINEL_REGION_ID
            else None
        )
        namespace = _job_namespace(session, dag_id, run_id, task_id, map_index)
        # Back to the pool before waiting for the cluster: requests waiting on one LIST must not hold
        # the connections that LIST may need (the hook reads its connection on first use).
        session.close()
        state = cluster()
        namespaces = [*([namespace] if namespace else []), *state.namespaces]
        with state.budget.started(state.request_seconds):
            try:
                jobs = state.jobs(namespaces)
            except Exception as error:
                raise _cluster_error(error) from error
            job = (
                view.newest_job_of(jobs, task_instance_key(dag_id, task_id, run_id, map_index, loop=loop))
                if loop
                else None
            )
            # A mapped task has a region on 3.4 whether in a loop or not (region index = map index): its job
            # may carry the key without one. A task of a loop's body (map index -1) has only its loop key.
            if job is None and (loop is None or loop.region_index == map_index):
                job = view.newest_job_of(
                    jobs,
                    task_instance_key(dag_id, task_id, run_id, map_index),
                    legacy_task_instance_key(dag_id, task_id, run_id, map_index),
                )
            if job is None:
                raise HTTPException(
                    status_code=404,
                    detail="no training job of this task instance in namespace(s) "
                    f"{', '.join(dict.fromkeys(namespaces))} (not submitted yet, or deleted)",
                )
            metadata = job["metadata"]
            try:
                (found,) = state.pods_and_events.jobs(
                    metadata["namespace"], f"{job['kind']}/{metadata['name']}", wait=state.budget.left()
                )
            except Exception as error:
                raise _cluster_error(error) from error
            wait = state.waits([job]).get(waits.key_of(job))
        detail = view.job_detail(
            job,
            now=time.time(),
            pods=found["pods"],
            events=found["events"],
            log=found["log"],
            cluster=found.get("cluster"),
        )
        detail["chart"] = state.history.chart(job, found["pods"])
        return {"job": {**detail, "wait": wait}, "cluster_lists": state.cache.lists}

    @app.get("/api/jobs")
    def jobs(
        user: GetUserDep,
        session: SessionDep,
        state: str | None = None,
        namespace: str | None = None,
        dag_id: str | None = None,
    ) -> dict[str, Any]:
        from airflow.api_fastapi.app import get_auth_manager

        current = cluster()
        with current.budget.started(current.request_seconds):
            try:
                found = current.jobs(current.namespaces)
            except Exception as error:
                raise _cluster_error(error) from error
            held = current.waits(found)
        allowed = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
        now = time.time()
        summaries = view.this_deployments(
            {**view.job_summary(job, now=now), "wait": held.get(waits.key_of(job))} for job in found
        )
        # Jobs made before the dag-key label are matched on their DAG-id label: against every DAG id known.
        known = (
            session.scalars(select(DagModel.dag_id)).all()
            if any(not row["task_instance"]["dag_key"] for row in summaries)
            else []
        )
        rows = view.readable(summaries, allowed, known)
        rows = [row for row in rows if view.matches(row, state=state, namespace=namespace, dag_id=dag_id)]
        dag_ids = {row["task_instance"]["dag_id"] for row in rows}
        task_ids = {row["task_instance"]["task_id"] for row in rows}
        # Airflow 3.4: map_index is the region index, and the region tells a loop's iterations apart.
        region = [TaskInstance.region_id] if hasattr(TaskInstance, "region_id") else []
        tis = session.execute(
            select(TaskInstance.dag_id, TaskInstance.task_id, TaskInstance.run_id, TaskInstance.map_index, *region)
            .where(TaskInstance.dag_id.in_(dag_ids), TaskInstance.task_id.in_(task_ids))
            .order_by(TaskInstance.id.desc())
            .limit(MAX_LINKED_TASK_INSTANCES)
        ).all()
        result = view.page(
            view.link_task_instances(
                rows,
                [(dag, task, run, int(index), *(str(r) for r in region)) for dag, task, run, index, *region in tis],
            )
        )
        return {**result, "namespaces": current.namespaces, "cluster_lists": current.cache.lists}

    return app
