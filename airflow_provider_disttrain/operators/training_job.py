"""``TrainingJobOperator``: submit one Kubeflow training job and wait for it, in sync or deferrable mode.

The operator orchestrates; the pure modules decide (``manifest`` builds and validates, ``naming``
names, ``outcome`` judges a job, ``diagnostics`` explains a failure) and the hooks do the I/O. Module
level imports stay light so that DAG files importing the operator parse fast: the hooks, the
trigger and the Kubernetes clients are imported inside the methods that run on a worker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferralTimeout

from airflow_provider_disttrain import outcome as outcomes
from airflow_provider_disttrain.connection import ClusterConnectionMixin
from airflow_provider_disttrain.exceptions import (
    InvalidJobSpecError,
    JobAlreadyExistsError,
    JobFailedError,
    JobTimeoutError,
    TrainingJobError,
)
from airflow_provider_disttrain.kinds import JobKind, get_job_kind
from airflow_provider_disttrain.kueue import QUEUE_NAME_LABEL, held_by_kueue, queue_name, validate_queue_name
from airflow_provider_disttrain.links import TrainingJobLink
from airflow_provider_disttrain.live_logs import LOG_POSITION_ANNOTATION, decode_position
from airflow_provider_disttrain.logs import LEADER, LogForwarder, validate_log_replicas
from airflow_provider_disttrain.manifest.builder import JobParameters, RunPolicy, build_manifest, set_identity
from airflow_provider_disttrain.manifest.loading import (
    is_manifest_path,
    load_manifest,
    manifest_template,
    template_search_roots,
)
from airflow_provider_disttrain.manifest.pod_validation import (
    env_values_by_name,
    validate_resources_parameter,
    validate_size_limit,
)
from airflow_provider_disttrain.manifest.validation import (
    max_job_name_length,
    validate_log_replicas_exist,
    validate_manifest,
    validate_namespace,
    validate_namespace_agrees,
)
from airflow_provider_disttrain.metrics import leader_metrics
from airflow_provider_disttrain.naming import (
    TASK_INSTANCE_LABEL,
    generate_job_name,
    task_instance_key,
    task_instance_labels,
)
from airflow_provider_disttrain.outcome import JobRef, check_job, seconds_to_deadline
from airflow_provider_disttrain.status import JobState, describe_state, has_run, job_result, job_state, parse_time

if TYPE_CHECKING:
    import jinja2
    from airflow.sdk import Context

    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook

IF_EXISTS_CHOICES = ("reattach", "fail", "replace")
DELETE_ON_FINISH_CHOICES = ("never", "succeeded", "always")
STATE_STORE_KEY = "disttrain_job"
# Airflow 3 (through 3.3) does not time a deferred task out by its execution_timeout: the execution API
# sets the deferral's trigger_timeout only from the ``timeout`` given to ``defer``. The trigger enforces
# execution_timeout (its execution_deadline); the deferral timeout, this much later, is a backstop for a
# trigger that never reports (triggerer down), so the job is still deleted. The scheduler looks for
# timed-out deferrals every [scheduler] trigger_timeout_check_interval (15 s by default).
DEFERRAL_BACKSTOP = timedelta(minutes=2)


def _seconds(value: timedelta | float | int | None, field: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(f"{field}: expected a positive number of seconds or a timedelta, got {value!r}")
    return float(seconds)


def _choice(value: str, choices: Sequence[str], field: str) -> str:
    if value not in choices:
        raise ValueError(f"{field}: {value!r} is not one of {', '.join(choices)}")
    return value


def _positive_int(value: int | None, field: str, minimum: int = 1) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{field}: expected an integer >= {minimum}, got {value!r}")
    return value


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
            "shorter poll_interval, or delete_on_finish to delete the job once the task has its result",
        )


class TrainingJobOperator(ClusterConnectionMixin, BaseOperator):
    """Submit a Kubeflow training job (any kind in the kinds table) and wait until it finishes.

    Describe the job with ``job_manifest`` (a dict, YAML text or a ``.yaml``/``.yml``/``.json`` file,
    rendered with Jinja), with builder parameters, or both (parameters win). The return value is a
    JSON-safe summary: ``name``, ``namespace``, ``kind``, ``uid``, ``state``, ``conditions``,
    ``start_time``, ``completion_time``, ``duration_seconds``, ``replica_statuses``.

    :param kind: job kind, e.g. ``PyTorchJob``, ``MPIJob``, ``TFJob``, ``XGBoostJob``, ``PaddleJob``, ``JAXJob``.
    :param job_manifest: the job as a dict, YAML text or path to a YAML/JSON file (templated).
    :param job_name: explicit job name; without it a name is generated from the manifest's name or the
        task id plus a random suffix. With an explicit name ``if_exists`` decides what an existing job means.
    :param namespace: namespace (default: the manifest's, else the connection's, else ``default``).
    :param kubernetes_conn_id: the cncf.kubernetes connection (kubeconfig, in-cluster, context, namespace).
    :param cluster_context: kubeconfig context overriding the connection's.
    :param config_file: kubeconfig file overriding the connection's.
    :param image: container image of every replica.
    :param command: container command (for an MPIJob, the launcher's).
    :param args: container args.
    :param env: environment, as a mapping, a list of ``"NAME=value"`` strings (as docker writes them) or a
        list of Kubernetes ``EnvVar`` dicts.
    :param num_workers: Worker replicas.
    :param resources: container resources for every replica, or a mapping of replica type to resources.
    :param gpus_per_replica: shortcut for ``limits: {nvidia.com/gpu: N}`` on each (GPU-using) replica.
    :param restart_policy: replica restart policy (Always, OnFailure, Never, ExitCode; MPI: Never, OnFailure).
    :param clean_pod_policy: ``runPolicy.cleanPodPolicy`` (All, Running, None).
    :param ttl_seconds_after_finished: ``runPolicy.ttlSecondsAfterFinished``.
    :param active_deadline_seconds: ``runPolicy.activeDeadlineSeconds``.
    :param backoff_limit: ``runPolicy.backoffLimit``.
    :param queue: Kueue LocalQueue to submit to: sets the job's ``kueue.x-k8s.io/queue-name`` label, so
        Kueue holds the job suspended until its ClusterQueue has quota for it.
    :param scheduling_queue: ``runPolicy.schedulingPolicy.queue``, the gang scheduler's queue (Volcano,
        scheduler-plugins); this was ``queue`` before Kueue support.
    :param priority_class: ``runPolicy.schedulingPolicy.priorityClass``.
    :param min_available: ``runPolicy.schedulingPolicy.minAvailable``.
    :param labels: labels for the job and its pods.
    :param annotations: annotations for the job and its pods.
    :param node_selector: pod node selector.
    :param tolerations: pod tolerations.
    :param volumes: pod volumes.
    :param volume_mounts: container volume mounts.
    :param service_account_name: pod service account.
    :param image_pull_secrets: names of image pull secrets.
    :param shm_size: size of a memory-backed ``/dev/shm`` (e.g. ``"8Gi"``), which PyTorch data loaders need.
    :param spec_fields: extra kind-specific ``spec`` fields, deep-merged (the subclasses fill this).
    :param if_exists: for an explicit ``job_name`` that exists: ``reattach`` (if it is still running),
        ``fail`` or ``replace``.
    :param wait_for_completion: wait for the job to finish (False returns as soon as it is created).
    :param deferrable: wait in the triggerer; defaults to ``[operators] default_deferrable``.
    :param poll_interval: seconds between status reads (sync mode, or the trigger's fallback polling).
    :param startup_timeout: how long the job may take to first run (queued, pods Pending, or held suspended)
        before the task fails; a job suspended after it ran is waited for, within ``execution_timeout``.
        For a job Kueue holds, the clock starts when Kueue admits it (time in the queue does not count).
    :param queue_timeout: how long a job with a Kueue queue may wait for its first admission (default: no
        limit); past it the task fails with Kueue's reason and the job is deleted, leaving nothing queued.
    :param delete_on_finish: ``never``, ``succeeded`` or ``always`` delete the job once it finished.
    :param delete_on_timeout: delete the job when a timeout fails the task (default True).
    :param delete_on_kill: delete the job when the task is killed (mark failed, clear) (default True).
    :param log_replicas: whose logs go to the task log: ``leader``, ``all``, ``none`` or a list of
        replicas such as ``["master-0", "worker-1"]``.
    :param stream_logs: when deferred, the triggerer follows the leader's log into the task log while the
        job runs (at most ``live_logs.DEFAULT_BYTES_PER_SECOND`` per job; off by default). The sync wait
        always copies the chosen replicas' new lines on every poll; without this, a deferred task copies
        them once, when the job has ended.
    :param dry_run: only ask the API server to validate the job (``dryRun=All``); nothing is created.
    """

    template_fields: Sequence[str] = (
        "job_manifest",
        "job_name",
        "namespace",
        "image",
        "command",
        "args",
        "env",
        "labels",
        "annotations",
        "config_file",
        "cluster_context",
    )
    # No field is read as a file for its suffix (``args=["--config", "model.yaml"]``, ``config_file``, a
    # ConfigMap key ``train.json`` in a dict manifest): only a ``job_manifest`` path is, see below.
    template_ext: Sequence[str] = ()
    template_fields_renderers = {"job_manifest": "yaml", "env": "json", "labels": "json"}
    operator_extra_links = (TrainingJobLink(),)
    ui_color = "#e8f0fe"
    default_kind = "PyTorchJob"

    def __init__(
        self,
        *,
        kind: str | None = None,
        job_manifest: Mapping[str, Any] | str | None = None,
        job_name: str | None = None,
        namespace: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        image: str | None = None,
        command: Sequence[str] | None = None,
        args: Sequence[str] | None = None,
        env: Mapping[str, Any] | Sequence[Mapping[str, Any] | str] | None = None,
        num_workers: int | None = None,
        resources: Mapping[str, Any] | None = None,
        gpus_per_replica: int | None = None,
        restart_policy: str | None = None,
        clean_pod_policy: str | None = None,
        ttl_seconds_after_finished: int | None = None,
        active_deadline_seconds: int | None = None,
        backoff_limit: int | None = None,
        queue: str | None = None,
        scheduling_queue: str | None = None,
        priority_class: str | None = None,
        min_available: int | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[Mapping[str, Any]] | None = None,
        volumes: Sequence[Mapping[str, Any]] | None = None,
        volume_mounts: Sequence[Mapping[str, Any]] | None = None,
        service_account_name: str | None = None,
        image_pull_secrets: Sequence[str] | None = None,
        shm_size: str | None = None,
        spec_fields: Mapping[str, Any] | None = None,
        if_exists: str = "reattach",
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 10.0,
        startup_timeout: timedelta | float | None = timedelta(hours=1),
        queue_timeout: timedelta | float | None = None,
        delete_on_finish: str = "never",
        delete_on_timeout: bool = True,
        delete_on_kill: bool = True,
        log_replicas: str | Sequence[str] = LEADER,
        stream_logs: bool = False,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kind = get_job_kind(kind or self.default_kind).kind
        self.job_manifest = job_manifest
        self.job_name = job_name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.image = image
        self.command = command
        self.args = args
        self.env = env
        self.labels = labels
        self.annotations = annotations
        # Parameters that are not templated are checked and packed now, so a typo fails at parse time.
        self.num_workers = _positive_int(num_workers, "num_workers")
        self.gpus_per_replica = _positive_int(gpus_per_replica, "gpus_per_replica", minimum=0)
        validate_resources_parameter(self.job_kind, resources)
        if shm_size is not None:
            validate_size_limit(shm_size, "shm_size")
        if queue is not None:
            validate_queue_name(queue, "queue")
        # Not ``self.queue``: that is BaseOperator's executor queue (which this parameter name shadows).
        self.kueue_queue = queue
        self.builder_options: dict[str, Any] = {
            "resources": resources,
            "gpus_per_replica": self.gpus_per_replica,
            "restart_policy": restart_policy,
            "run_policy": RunPolicy(
                clean_pod_policy=clean_pod_policy,
                ttl_seconds_after_finished=ttl_seconds_after_finished,
                active_deadline_seconds=active_deadline_seconds,
                backoff_limit=backoff_limit,
                queue=scheduling_queue,
                priority_class=priority_class,
                min_available=min_available,
            ),
            "node_selector": node_selector,
            "tolerations": tolerations,
            "volumes": volumes,
            "volume_mounts": volume_mounts,
            "service_account_name": service_account_name,
            "image_pull_secrets": image_pull_secrets,
            "shm_size": shm_size,
            "spec_fields": spec_fields,
        }
        self.if_exists = _choice(if_exists, IF_EXISTS_CHOICES, "if_exists")
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        self.poll_interval = _seconds(poll_interval, "poll_interval") or 10.0
        self.startup_timeout = _seconds(startup_timeout, "startup_timeout")
        self.queue_timeout = _seconds(queue_timeout, "queue_timeout")
        self.delete_on_finish = _choice(delete_on_finish, DELETE_ON_FINISH_CHOICES, "delete_on_finish")
        self.delete_on_timeout = delete_on_timeout
        self.delete_on_kill = delete_on_kill
        validate_log_replicas(log_replicas)
        self.log_replicas = log_replicas
        self.stream_logs = bool(stream_logs)
        # Not ``self.dry_run``: that name is BaseOperator's method (render templates without running).
        self.server_dry_run = dry_run
        self._job_ref: JobRef | None = None
        self._keep_job_on_kill = False

    def _do_render_template_fields(
        self,
        parent: Any,
        template_fields: Iterable[str],
        context: Context,
        jinja_env: jinja2.Environment,
        seen_oids: set[int],
    ) -> None:
        """Render ``job_manifest`` given as a file path (relative to the DAG folder, or absolute) as a
        template file, and every other field as a plain template (Airflow's ``template_ext`` would read
        any field ending in the suffix as a file). Mapped tasks render through here too."""
        if parent is self and "job_manifest" in template_fields and is_manifest_path(self.job_manifest):
            self.job_manifest = self._render(manifest_template(jinja_env, str(self.job_manifest)), context)
            template_fields = [field for field in template_fields if field != "job_manifest"]
        super()._do_render_template_fields(parent, template_fields, context, jinja_env, seen_oids)
        if parent is self and self.env:
            from airflow.sdk.log import mask_secret

            # Airflow masks a rendered mapping's values by their keys only: give it the names of every form.
            values: dict[str, Any] = env_values_by_name(self.env)
            mask_secret(values)

    # -- collaborators ------------------------------------------------------------------------------

    @property
    def job_kind(self) -> JobKind:
        return get_job_kind(self.kind)

    # -- building the manifest (pure) ---------------------------------------------------------------

    def job_parameters(self) -> JobParameters:
        return JobParameters(
            image=self.image,
            command=self.command,
            args=self.args,
            env=self.env,
            num_workers=self.num_workers,
            labels=self.labels,
            annotations=self.annotations,
            **self.builder_options,
        )

    # The three steps a kind without replica specs (TrainJob) does its own way; the rest is shared.

    def assemble_manifest(self) -> dict[str, Any]:
        """The job from ``job_manifest`` and the parameters, not yet named or checked."""
        return build_manifest(
            self.job_kind,
            load_manifest(self.job_manifest, search_roots=template_search_roots(self.get_template_env().loader)),
            self.job_parameters(),
        )

    def job_name_room(self, manifest: Mapping[str, Any], namespace: str) -> int:
        """The longest name a generated job name may have (its pods' names must stay DNS labels)."""
        return max_job_name_length(self.job_kind, manifest)

    def validate_job_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Refuse, naming the field, what the cluster would refuse or silently fail to run."""
        validate_manifest(self.job_kind, manifest)

    def build_job_manifest(self, context: Context, default_namespace: str) -> dict[str, Any]:
        """The exact manifest this task instance submits: built, named, labelled and validated."""
        kind = self.job_kind
        manifest = self.assemble_manifest()
        metadata = manifest.get("metadata") or {}
        validate_namespace_agrees(manifest, self.namespace)
        namespace = self.namespace or metadata.get("namespace") or default_namespace
        validate_namespace(
            namespace, "metadata.namespace" if not self.namespace and metadata.get("namespace") else "namespace"
        )
        validate_log_replicas_exist(kind, manifest, self.log_replicas)
        if self.job_name:
            name = self.job_name
        else:
            base = metadata.get("name") or metadata.get("generateName") or self.task_id
            name = generate_job_name(base, max_length=self.job_name_room(manifest, namespace))
        ti = context["ti"]
        labels = task_instance_labels(ti.dag_id, ti.task_id, ti.run_id, ti.map_index, ti.try_number)
        if self.kueue_queue is not None:
            # On the job itself, for every kind: Kueue reads the label there (not on the pods).
            labels[QUEUE_NAME_LABEL] = self.kueue_queue
        manifest = set_identity(manifest, name, namespace, labels)
        if (queue := queue_name(manifest)) is not None:
            validate_queue_name(queue, "queue" if self.kueue_queue else f"metadata.labels[{QUEUE_NAME_LABEL}]")
        self.validate_job_manifest(manifest)
        if self.wait_for_completion:
            ttl_given = self.builder_options["run_policy"].ttl_seconds_after_finished is not None
            check_ttl_leaves_time_to_wait(
                manifest,
                self.poll_interval,
                "ttl_seconds_after_finished" if ttl_given else "spec.runPolicy.ttlSecondsAfterFinished",
            )
        return manifest

    # -- execute ------------------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        hook = self.hook
        manifest = self.build_job_manifest(context, hook.default_namespace())
        if self.server_dry_run:
            admitted = hook.create_job(self.kind, manifest, manifest["metadata"]["namespace"], dry_run=True)
            self.log.info("Dry run: the API server accepted %s %s", self.kind, manifest["metadata"]["name"])
            return job_result(admitted, self.kind)

        if (earlier := self._earlier_try_result(hook, context)) is not None:
            # The job succeeded under an earlier try and is gone since (delete_on_finish, TTL): its result stands.
            context["ti"].xcom_push(key="job_name", value=earlier["name"])
            context["ti"].xcom_push(key="job_namespace", value=earlier["namespace"])
            self.log.info(
                "%s %s/%s succeeded under an earlier try: not training again",
                self.kind,
                earlier["namespace"],
                earlier["name"],
            )
            self._remember(context, task_succeeded=True)
            return earlier

        return self._submit_and_wait(hook, manifest, context)

    def _submit_and_wait(self, hook: TrainingJobHook, manifest: dict[str, Any], context: Context) -> dict[str, Any]:
        job, reattached = self._submit_or_reattach(hook, manifest, context)
        metadata = job["metadata"]
        self._job_ref = JobRef(self.kind, metadata["name"], metadata["namespace"], metadata.get("uid"))
        context["ti"].xcom_push(key="job_name", value=metadata["name"])
        context["ti"].xcom_push(key="job_namespace", value=metadata["namespace"])
        self.log.info(
            "%s %s: %s",
            "Reattached to" if reattached else "Submitted",
            self._job_ref.title,
            describe_state(job),
        )
        if not self.wait_for_completion:
            self._remember(context, task_succeeded=True)
            return job_result(job, self.kind)

        startup_deadline = self._startup_deadline(job)
        if self.deferrable and not job_state(job).is_terminal:
            self._defer(
                hook, startup_deadline, context, reattached=reattached, queue_deadline=self._queue_deadline(job)
            )
        try:
            outcome = self._wait(hook, self._job_ref, startup_deadline)
        except AirflowTaskTimeout:
            self._keep_job_on_kill = not self.delete_on_timeout
            raise
        if reattached and self._reattached_job_vanished(hook, outcome):
            return self._submit_and_wait(hook, self.build_job_manifest(context, hook.default_namespace()), context)
        return self._finish(hook, outcome, context, logs_forwarded=True)

    def _reattached_job_vanished(self, hook: TrainingJobHook, outcome: dict[str, Any]) -> bool:
        """Whether the job this try took over from an earlier one is gone, so a fresh one must be submitted.

        Clearing a deferred task starts the new try at once and the old try's trigger deletes the job
        (``on_kill``) a moment later: the new try may have taken that job over already. The user asked
        for the task to run again, so it does, rather than failing on the earlier try's cleanup.
        """
        ref = self._job_ref
        if ref is None or outcome["status"] != outcomes.ERROR:
            return False
        job = hook.get_job(ref.kind, ref.name, ref.namespace)
        gone = job is None or job["metadata"].get("uid") != ref.uid or bool(job["metadata"].get("deletionTimestamp"))
        if gone:
            self.log.warning(
                "%s, which this try took over from an earlier one, was deleted (the earlier try's cleanup, "
                "e.g. after the task was cleared): submitting a fresh job",
                ref.title,
            )
        return gone

    def execute_complete(
        self, context: Context, event: dict[str, Any], job_uid: str | None = None, reattached: bool = False
    ) -> dict[str, Any]:
        """Resume after the trigger fired: the same ending as the sync path.

        ``job_uid`` is the uid of the job this task submitted (the event's job may be a replacement
        someone else created under the same name, which must not be deleted in our stead);
        ``reattached`` says the job was taken over from an earlier try rather than submitted by this one.
        """
        uid = job_uid or (event.get("job") or {}).get("uid")
        self._job_ref = JobRef(self.kind, event["name"], event["namespace"], uid)
        hook = self.hook
        if reattached and self._reattached_job_vanished(hook, event):
            return self._submit_and_wait(hook, self.build_job_manifest(context, hook.default_namespace()), context)
        return self._finish(hook, event, context, logs_forwarded=False)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        # If the scheduler's own deferral timeout beat the trigger's deadline, the job must still go.
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except TaskDeferralTimeout:
            if self.delete_on_timeout and (job := self._own_job_from_xcom(context)):
                metadata = job["metadata"]
                self.log.warning(
                    "Deferral timed out: deleting %s %s/%s", self.kind, metadata["namespace"], metadata["name"]
                )
                self.hook.delete_job(self.kind, metadata["name"], metadata["namespace"], uid=metadata.get("uid"))
            raise

    def on_kill(self) -> None:
        """The task was killed while waiting in sync mode (or timed out): delete its job."""
        ref = self._job_ref
        if ref is None or not self.delete_on_kill or self._keep_job_on_kill:
            return
        self.log.info("Task killed: deleting %s", ref.title)
        self.hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid)

    # -- submission and reattachment ----------------------------------------------------------------

    def _submit_or_reattach(
        self, hook: TrainingJobHook, manifest: dict[str, Any], context: Context
    ) -> tuple[dict[str, Any], bool]:
        namespace = manifest["metadata"]["namespace"]
        name = manifest["metadata"]["name"]
        store = context.get("task_state_store")
        if existing := self._earlier_try_job(hook, manifest, store):
            return existing, True
        if self.job_name and (current := hook.get_job(self.kind, name, namespace)):
            # An earlier try of this very task instance left it (finished, or the reattach above took it):
            # replacing it is the retry the user asked for, not the clash ``if_exists`` guards against.
            own = (current["metadata"].get("labels") or {}).get(TASK_INSTANCE_LABEL) == (
                manifest["metadata"]["labels"][TASK_INSTANCE_LABEL]
            )
            if self.if_exists == "fail" and not own:
                raise JobAlreadyExistsError(f"{self.kind} {namespace}/{name} already exists (if_exists='fail')")
            if self.if_exists == "reattach" and not job_state(current).is_terminal:
                return current, True
            self.log.info("Replacing %s %s/%s (%s)", self.kind, namespace, name, describe_state(current))
            metadata = current["metadata"]
            hook.delete_and_wait(self.kind, metadata["name"], metadata["namespace"], uid=metadata.get("uid"))
        try:
            job = hook.create_job(self.kind, manifest, namespace)
        except JobAlreadyExistsError:
            # A create whose reply was lost and was retried, or a race with another try of this task.
            job = hook.get_job(self.kind, name, namespace)
            ours = (
                job
                and (job["metadata"].get("labels") or {}).get(TASK_INSTANCE_LABEL)
                == (manifest["metadata"]["labels"][TASK_INSTANCE_LABEL])
            )
            if not ours:
                raise
        if store is not None:
            store.set(
                STATE_STORE_KEY,
                {"kind": self.kind, "name": name, "namespace": namespace, "uid": job["metadata"].get("uid")},
            )
        return job, False

    @staticmethod
    def _retried_entry(store: Any) -> dict[str, Any] | None:
        """What an earlier try of this task instance saved, unless that try ended in the task's success.

        A run after a successful one can only be a user's deliberate clear (a retry follows a failure),
        which asks for a new training: the saved job is not this run's to take over.
        """
        saved = store.get(STATE_STORE_KEY) if store is not None else None
        return saved if saved and not saved.get("task_succeeded") else None

    def _earlier_try_result(self, hook: TrainingJobHook, context: Context) -> dict[str, Any] | None:
        """The saved result of a job an earlier try saw succeed and that no longer exists."""
        saved = self._retried_entry(context.get("task_state_store"))
        if not saved or not saved.get("result"):
            return None
        job = hook.get_job(saved["kind"], saved["name"], saved["namespace"])
        if job is not None and job["metadata"].get("uid") == saved.get("uid"):
            return None  # still there: taken over as a job, so the rest of the ending (delete_on_finish) runs
        return dict(saved["result"])

    def _remember(self, context: Context, **fields: Any) -> None:
        """Add to the task state store's entry for this task's job (no-op without a store)."""
        store, ref = context.get("task_state_store"), self._job_ref
        if store is None:
            return
        saved = store.get(STATE_STORE_KEY)
        entry: dict[str, Any] = dict(saved) if isinstance(saved, dict) else {}
        if ref is not None and entry.get("uid") != ref.uid:
            entry = {"kind": ref.kind, "name": ref.name, "namespace": ref.namespace, "uid": ref.uid}
        store.set(STATE_STORE_KEY, {**entry, **fields})

    def _earlier_try_job(self, hook: TrainingJobHook, manifest: dict[str, Any], store: Any) -> dict[str, Any] | None:
        """A job an earlier try of this task instance created: running, or (per the store) succeeded."""
        namespace = manifest["metadata"]["namespace"]
        if saved := self._retried_entry(store):
            job = hook.get_job(saved["kind"], saved["name"], saved["namespace"])
            if (
                job
                and job["metadata"].get("uid") == saved.get("uid")
                and job_state(job) is not JobState.FAILED
                and not job["metadata"].get("deletionTimestamp")  # an earlier try's kill is deleting it
            ):
                return job
        key = manifest["metadata"]["labels"][TASK_INSTANCE_LABEL]
        running = [
            job
            for job in hook.find_jobs(self.kind, namespace, {TASK_INSTANCE_LABEL: key})
            if not job_state(job).is_terminal and not job["metadata"].get("deletionTimestamp")
        ]
        return running[-1] if running else None

    # -- waiting --------------------------------------------------------------------------------------

    def _startup_deadline(self, job: dict[str, Any]) -> float | None:
        if self.startup_timeout is None:
            return None
        created_at = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
        start = created_at.timestamp() if created_at else time.time()
        return start + self.startup_timeout

    def _queue_deadline(self, job: dict[str, Any]) -> float | None:
        """``queue_timeout`` counted from the job's creation: when Kueue must have admitted it by."""
        if self.queue_timeout is None:
            return None
        created_at = parse_time((job.get("metadata") or {}).get("creationTimestamp"))
        return (created_at.timestamp() if created_at else time.time()) + self.queue_timeout

    def _execution_deadline(self, context: Context) -> float | None:
        if self.execution_timeout is None:
            return None
        start = getattr(context["ti"], "start_date", None)
        started = start.timestamp() if start else time.time()
        return started + self.execution_timeout.total_seconds()

    def _defer(
        self,
        hook: TrainingJobHook,
        startup_deadline: float | None,
        context: Context,
        *,
        reattached: bool = False,
        queue_deadline: float | None = None,
    ) -> None:
        from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

        assert self._job_ref is not None
        execution_deadline = self._execution_deadline(context)
        self.defer(
            trigger=TrainingJobTrigger(
                kind=self.kind,
                name=self._job_ref.name,
                namespace=self._job_ref.namespace,
                uid=self._job_ref.uid,
                startup_deadline=startup_deadline,
                execution_deadline=execution_deadline,
                queue_deadline=queue_deadline,
                poll_interval=self.poll_interval,
                delete_on_kill=self.delete_on_kill,
                stream_logs=self.stream_logs,
                connection=hook.trigger_connection(),
            ),
            method_name="execute_complete",
            kwargs={"job_uid": self._job_ref.uid, "reattached": reattached},
            timeout=None
            if execution_deadline is None
            else timedelta(seconds=max(0.0, execution_deadline - time.time())) + DEFERRAL_BACKSTOP,
        )

    def _wait(self, hook: TrainingJobHook, ref: JobRef, startup_deadline: float | None) -> dict[str, Any]:
        """Poll until ``check_job`` says the wait is over, copying the leader's new log lines each time."""
        from airflow_provider_disttrain.hooks.kueue import KueueWaitReporter

        forwarder = LogForwarder(hook, self.job_kind, ref.name, ref.namespace, self.log_replicas, self.log)
        kueue = KueueWaitReporter(hook, self.log)
        last_state: JobState | None = None
        # Once seen running, a later suspension is not "not started yet" (an MPIJob's conditions can't tell).
        seen_running = False
        while True:
            job = hook.get_job(ref.kind, ref.name, ref.namespace)
            forwarder.forward()
            seen_running = seen_running or (job is not None and has_run(job))
            now = time.time()
            deadlines: dict[str, Any] = {
                "startup_deadline": startup_deadline,
                "queue_deadline": self._queue_deadline(job) if job else None,
                "has_run": seen_running,
            }
            waiting_reason = kueue.observe(job)
            if outcome := check_job(ref, job, now=now, waiting_reason=waiting_reason, **deadlines):
                forwarder.forward()
                return outcome
            state = job_state(job or {})
            if state != last_state:
                self.log.info("%s is %s", ref.title, describe_state(job or {}))
                last_state = state
            remaining = seconds_to_deadline(state, now=now, job=job, **deadlines)
            time.sleep(self.poll_interval if remaining is None else min(self.poll_interval, remaining + 0.1))

    # -- the ending, shared by both modes -------------------------------------------------------------

    def _finish(
        self, hook: TrainingJobHook, outcome: dict[str, Any], context: Context, *, logs_forwarded: bool
    ) -> dict[str, Any]:
        ref = self._job_ref
        assert ref is not None
        status = outcome["status"]
        # A success lists the pods once, for the leader's metrics and (deferred) its logs.
        pods = self._final_pods(hook, ref) if status == outcomes.SUCCESS else None
        if not logs_forwarded:
            forwarder = LogForwarder(hook, self.job_kind, ref.name, ref.namespace, self.log_replicas, self.log)
            if self.stream_logs:
                self._resume_after_streamed_lines(hook, ref, forwarder)
            forwarder.forward(pods)
        job = hook.get_job(ref.kind, ref.name, ref.namespace) if status != outcomes.SUCCESS else None
        if status == outcomes.SUCCESS:
            result = self._with_metrics(outcome["job"], pods)
            self.log.info("%s succeeded in %s s", ref.title, result.get("duration_seconds"))
            # Saved before the job may be deleted: a retry (this worker dying from here on) returns it.
            self._remember(context, result=result)
            if self.delete_on_finish in ("succeeded", "always"):
                hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid)
            self._remember(context, task_succeeded=True)
            return result
        message = hook.explain_outcome(ref, outcome["message"], job, logger=self.log)
        if status == outcomes.FAILED:
            if self.delete_on_finish == "always":
                hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid)
            raise JobFailedError(message)
        if status == outcomes.TIMEOUT:
            if job is not None and held_by_kueue(job):
                # Left in the queue, it would take quota later for a task that has failed.
                hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid)
                message += f"\n{ref.title} was deleted: it was still queued by Kueue."
            elif self.delete_on_timeout:
                hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid)
                message += f"\n{ref.title} was deleted (delete_on_timeout=True)."
            raise JobTimeoutError(message)
        if (
            job is not None
            and not job_state(job).is_terminal
            and self._is_last_try(context)
            # Nothing will come back for this job: a later try would have reattached to it. The uid
            # precondition fails (False) when the job under this name is someone else's now.
            and hook.delete_job(ref.kind, ref.name, ref.namespace, uid=ref.uid)
        ):
            message += f"\n{ref.title} was deleted: this was the task's last try."
        raise TrainingJobError(message)

    def _resume_after_streamed_lines(self, hook: TrainingJobHook, ref: JobRef, forwarder: LogForwarder) -> None:
        """Copy only what the trigger did not stream: it left its position on the job (``live_logs``)."""
        job = hook.get_job(ref.kind, ref.name, ref.namespace)
        annotations = ((job or {}).get("metadata") or {}).get("annotations") or {}
        if (position := decode_position(annotations.get(LOG_POSITION_ANNOTATION))) is not None:
            forwarder.resume_from(*position)

    def _final_pods(self, hook: TrainingJobHook, ref: JobRef) -> list[dict[str, Any]] | None:
        try:
            return hook.list_job_pods(ref.name, ref.namespace, kind=self.job_kind)
        except Exception as error:  # metrics and logs are a courtesy: the job succeeded
            self.log.warning("Could not list the pods of %s (no metrics in the result): %r", ref.title, error)
            return None

    def _with_metrics(self, result: dict[str, Any], pods: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
        """The result with the leader's metrics (its termination message as a JSON object), when it wrote any."""
        if pods is None:
            return result
        metrics, why = leader_metrics(self.job_kind, pods)
        if metrics is None:
            self.log.info("No training metrics in the result: %s", why)
            return result
        self.log.info("Training metrics from the leader: %s", json.dumps(metrics, sort_keys=True))
        return {**result, "metrics": metrics}

    def _is_last_try(self, context: Context) -> bool:
        return context["ti"].try_number > (self.retries or 0)

    def _own_job_from_xcom(self, context: Context) -> dict[str, Any] | None:
        """The job this task instance created, named in its XComs; None if that name now holds another's job."""
        ti = context["ti"]
        name = ti.xcom_pull(task_ids=ti.task_id, key="job_name", map_indexes=ti.map_index)
        namespace = ti.xcom_pull(task_ids=ti.task_id, key="job_namespace", map_indexes=ti.map_index)
        job = self.hook.get_job(self.kind, name, namespace) if name and namespace else None
        labels = (job or {}).get("metadata", {}).get("labels") or {}
        own = labels.get(TASK_INSTANCE_LABEL) == task_instance_key(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
        return job if own else None
