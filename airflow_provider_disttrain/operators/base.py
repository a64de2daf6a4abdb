"""``BaseTrainingJobOperator``: what every training operator shares (one job, submitted and waited for).

``BaseTrainingJobOperator`` orchestrates one job: build the manifest, claim the job (``identity``),
wait for it in sync or deferrable mode (``deadlines``, ``outcome``), and end the task (logs,
metrics, cleanup). It holds only the parameters every kind shares; a kind's operator adds its own
and says how its manifest is assembled, named and checked. The pure modules decide (``manifest``
builds and validates, ``naming`` names, ``outcome`` judges a job, ``diagnostics`` explains a
failure) and the hooks do the I/O. Module level imports stay light so that DAG files importing the
operator parse fast: the hooks, the trigger and the Kubernetes clients are imported where they run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowTaskTimeout, TaskDeferralTimeout

from airflow_provider_disttrain.hooks.worker_cluster import delete_killed_job
from airflow_provider_disttrain.job.deadlines import Deadlines
from airflow_provider_disttrain.job.gpus import gpus_per_replica
from airflow_provider_disttrain.job.kinds import JobKind, get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef, Outcome
from airflow_provider_disttrain.job.view import JobView
from airflow_provider_disttrain.kueue.dispatch import validate_worker_clusters
from airflow_provider_disttrain.kueue.hold import QUEUE_NAME_LABEL, queue_name, validate_queue_name
from airflow_provider_disttrain.manifest.builder import set_identity
from airflow_provider_disttrain.manifest.validation import (
    max_job_name_length,
    validate_log_replicas_exist,
    validate_manifest,
    validate_namespace,
    validate_namespace_agrees,
)
from airflow_provider_disttrain.operators.cluster_hook import ClusterConnectionMixin
from airflow_provider_disttrain.operators.ending import JobEnding
from airflow_provider_disttrain.operators.lineage import TrainingJobLineageMixin
from airflow_provider_disttrain.operators.links import TrainingJobLink
from airflow_provider_disttrain.operators.manifest_templates import ManifestTemplatesMixin
from airflow_provider_disttrain.operators.waiting import poll_until_over, trigger_for
from airflow_provider_disttrain.ownership.identity import JobIdentity, loop_region, task_instance_keys_of
from airflow_provider_disttrain.ownership.naming import (
    generate_job_name,
    task_instance_annotations,
    task_instance_labels,
)
from airflow_provider_disttrain.parameters import (
    IF_EXISTS_CHOICES,
    CleanupPolicy,
    WaitPolicy,
    check_ttl_leaves_time_to_wait,
    choice,
    require_type,
)
from airflow_provider_disttrain.pods.logs import LEADER, validate_log_replicas
from airflow_provider_disttrain.utils.clock import SYSTEM, Clock

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook


class BaseTrainingJobOperator(ManifestTemplatesMixin, TrainingJobLineageMixin, ClusterConnectionMixin, BaseOperator):
    """Submit one Kubeflow training job and wait until it finishes; what every kind's operator shares.

    Describe the job with ``job_manifest`` (a dict, YAML text or a ``.yaml``/``.yml``/``.json`` file,
    rendered with Jinja), with parameters, or both (parameters win). The return value is a JSON-safe
    summary: ``name``, ``namespace``, ``kind``, ``uid``, ``state``, ``conditions``, ``start_time``,
    ``completion_time``, ``duration_seconds``, ``replica_statuses``. Its Asset ``outlets`` (the model it
    writes) carry the job's identity and metrics in their events' ``extra`` (``operators/lineage.py``).

    :param job_manifest: the job as a dict, YAML text or path to a YAML/JSON file (templated).
    :param job_name: explicit job name; without it a name is generated from the manifest's name or the
        task id plus a random suffix. An existing job of that name is this task's only if it carries this
        task instance's labels; ``if_exists`` decides what any other existing job means.
    :param namespace: namespace (default: the manifest's, else the connection's, else ``default``).
    :param kubernetes_conn_id: the cncf.kubernetes connection (kubeconfig, in-cluster, context, namespace).
    :param cluster_context: kubeconfig context overriding the connection's.
    :param config_file: kubeconfig file overriding the connection's.
    :param image: container image of every replica.
    :param command: container command (for an MPIJob, the launcher's).
    :param args: container args.
    :param env: environment, as a mapping, a list of ``"NAME=value"`` strings (as docker writes them) or a
        list of Kubernetes ``EnvVar`` dicts.
    :param labels: labels for the job and its pods.
    :param annotations: annotations for the job and its pods.
    :param local_queue: the Kueue LocalQueue to submit to (the job's ``kueue.x-k8s.io/queue-name``
        label): Kueue holds the job suspended until its ClusterQueue has quota for it.
    :param if_exists: for an explicit ``job_name`` that holds a job of someone else: ``fail`` or
        ``reattach`` (both refuse it, naming its owner) or ``replace`` (delete it, submit this task's).
        This task instance's own job is reattached while it runs (``reattach``) and replaced otherwise.
    :param wait_for_completion: wait for the job to finish (False returns as soon as it is created).
    :param deferrable: wait in the triggerer; defaults to ``[operators] default_deferrable``.
    :param wait_policy: poll interval, startup and Kueue queue timeouts (``WaitPolicy``).
    :param cleanup_policy: when the job is deleted: once finished, on timeout, on kill (``CleanupPolicy``).
    :param log_replicas: whose logs go to the task log: ``leader``, ``all``, ``none`` or a list of
        replicas such as ``["master-0", "worker-1"]``.
    :param stream_logs: when deferred, the triggerer follows the leader's log into the task log while the
        job runs (at most ``live_logs.DEFAULT_BYTES_PER_SECOND`` per job; off by default). The sync wait
        always copies the chosen replicas' new lines on every poll; without this, a deferred task copies
        them once, when the job has ended.
    :param server_dry_run: only ask the API server to validate the job (``dryRun=All``); nothing is created.
    :param worker_clusters: MultiKueue worker cluster name -> kubernetes connection id (values templated):
        a dispatched job's pods, logs and events are read there; overrides the connection's extra of that name.
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
        "worker_clusters",
    )
    # No field is read as a file for its suffix (``args=["--config", "model.yaml"]``, ``config_file``, a
    # ConfigMap key ``train.json`` in a dict manifest): only a ``job_manifest`` path is, see below.
    template_ext: Sequence[str] = ()
    template_fields_renderers = {"job_manifest": "yaml", "env": "json", "labels": "json"}
    operator_extra_links = (TrainingJobLink(),)
    ui_color = "#e8f0fe"
    kind: str

    def __init__(
        self,
        *,
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
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        local_queue: str | None = None,
        if_exists: str = "reattach",
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        wait_policy: WaitPolicy | None = None,
        cleanup_policy: CleanupPolicy | None = None,
        log_replicas: str | Sequence[str] = LEADER,
        stream_logs: bool = False,
        server_dry_run: bool = False,
        worker_clusters: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
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
        # Checked now, as every parameter that is not templated, so that a typo fails at parse time.
        if local_queue is not None:
            validate_queue_name(local_queue, "local_queue")
        self.local_queue = local_queue
        self.if_exists = choice(if_exists, IF_EXISTS_CHOICES, "if_exists")
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        require_type(wait_policy, WaitPolicy, "wait_policy")
        require_type(cleanup_policy, CleanupPolicy, "cleanup_policy")
        self.wait_policy = wait_policy or WaitPolicy()
        self.cleanup_policy = cleanup_policy or CleanupPolicy()
        validate_log_replicas(log_replicas)
        self.log_replicas = log_replicas
        self.stream_logs = bool(stream_logs)
        self.server_dry_run = server_dry_run
        self.worker_clusters = validate_worker_clusters(worker_clusters) or None
        self._job_ref: JobRef | None = None
        self._claiming: tuple[JobIdentity, str, str] | None = None
        self._keep_job_on_kill = False

    @property
    def job_kind(self) -> JobKind:
        return get_job_kind(self.kind)

    clock: Clock = SYSTEM
    """The one clock every deadline of this task is counted on (``deadlines``) and its polls sleep on; a test
    replaces it."""

    # -- the steps each kind's operator does its own way ----------------------------------------------

    def assemble_manifest(self) -> dict[str, Any]:
        """The job from ``job_manifest`` and the parameters, not yet named or checked."""
        raise NotImplementedError

    def job_name_room(self, manifest: Mapping[str, Any], namespace: str) -> int:
        """The longest name a generated job name may have (its pods' names must stay DNS labels)."""
        return max_job_name_length(self.job_kind, manifest)

    def validate_job_manifest(self, manifest: Mapping[str, Any]) -> None:
        """Refuse, naming the field, what the cluster would refuse or silently fail to run."""
        validate_manifest(self.job_kind, manifest)

    def ttl_field(self) -> str:
        """The field to name when the job's TTL would let it vanish before the wait sees its end."""
        return "spec.runPolicy.ttlSecondsAfterFinished"

    # -- building the manifest (pure) ---------------------------------------------------------------

    def build_job_manifest(self, context: Context, default_namespace: str) -> dict[str, Any]:
        """The exact manifest this task instance submits: built, named, labelled and validated."""
        manifest = self.assemble_manifest()
        metadata = manifest.get("metadata") or {}
        validate_namespace_agrees(manifest, self.namespace)
        namespace = self.namespace or metadata.get("namespace") or default_namespace
        validate_namespace(
            namespace, "metadata.namespace" if not self.namespace and metadata.get("namespace") else "namespace"
        )
        validate_log_replicas_exist(self.job_kind, manifest, self.log_replicas)
        if self.job_name:
            name = self.job_name
        else:
            base = metadata.get("name") or metadata.get("generateName") or self.task_id
            name = generate_job_name(base, max_length=self.job_name_room(manifest, namespace))
        ti = context["ti"]
        labels = task_instance_labels(
            ti.dag_id, ti.task_id, ti.run_id, ti.map_index, ti.try_number, loop=loop_region(ti, context)
        )
        if self.local_queue is not None:
            # On the job itself, for every kind: Kueue reads the label there (not on the pods).
            labels[QUEUE_NAME_LABEL] = self.local_queue
        # The full ids and whether this task waits for the job, for the orphan cleanup (orphans.job_owner, judge).
        annotations = task_instance_annotations(ti.dag_id, ti.task_id, wait_for_completion=self.wait_for_completion)
        manifest = set_identity(manifest, name, namespace, labels, annotations)
        if (queue := queue_name(manifest)) is not None:
            validate_queue_name(queue, "local_queue" if self.local_queue else f"metadata.labels[{QUEUE_NAME_LABEL}]")
        self.validate_job_manifest(manifest)
        if self.wait_for_completion:
            check_ttl_leaves_time_to_wait(manifest, self.wait_policy.poll_seconds, self.ttl_field())
        return self.remember_manifest(manifest)

    # -- execute ------------------------------------------------------------------------------------

    def identity(self, context: Context) -> JobIdentity:
        ti = context["ti"]
        return JobIdentity(
            self.hook,
            self.kind,
            task_instance_keys_of(ti, context),
            context.get("task_state_store"),
            self.log,
            try_number=ti.try_number,
        )

    def execute(self, context: Context) -> dict[str, Any]:
        try:
            return self._execute(context)
        except AirflowTaskTimeout:
            # Wherever the timer struck (connecting, submitting, waiting, ending), the task runner calls
            # on_kill next: it must follow the timeout's policy, not the kill's.
            self._keep_job_on_kill = not self.cleanup_policy.on_timeout
            raise

    def _execute(self, context: Context) -> dict[str, Any]:
        hook = self.hook
        manifest = self.build_job_manifest(context, hook.default_namespace())
        if self.server_dry_run:
            admitted = hook.create_job(self.kind, manifest, manifest["metadata"]["namespace"], dry_run=True)
            self.log.info("Dry run: the API server accepted %s %s", self.kind, manifest["metadata"]["name"])
            return JobView.of(admitted).result(self.kind)

        identity = self.identity(context)
        if (earlier := identity.earlier_try_result()) is not None:
            # The job succeeded under an earlier try and is gone since (cleanup, TTL): its result stands.
            JobIdentity.publish(context["ti"], JobRef(self.kind, earlier["name"], earlier["namespace"]))
            self.log.info(
                "%s %s/%s succeeded under an earlier try: not training again",
                self.kind,
                earlier["namespace"],
                earlier["name"],
            )
            identity.remember(None, task_succeeded=True)
            return self.record_result(context, earlier)
        return self._submit_and_wait(hook, manifest, context)

    def _submit_and_wait(self, hook: TrainingJobHook, manifest: dict[str, Any], context: Context) -> dict[str, Any]:
        from airflow_provider_disttrain.hooks.kueue import refuse_a_queue_that_admits_nothing

        refuse_a_queue_that_admits_nothing(hook, self.kind, manifest, self.log)
        worker_clusters = self.worker_cluster_map()  # a bad mapping is refused before anything is sent
        identity = self.identity(context)
        submitted_at = self.clock.wall()
        self._claiming = (identity, manifest["metadata"]["name"], manifest["metadata"]["namespace"])
        job, reattached = identity.claim(
            manifest, explicit_name=bool(self.job_name), if_exists=self.if_exists, submitted_at=submitted_at
        )
        self._claiming = None
        metadata = job["metadata"]
        self._job_ref = ref = JobRef(self.kind, metadata["name"], metadata["namespace"], metadata.get("uid"))
        JobIdentity.publish(context["ti"], ref)
        seen = JobView.observe(ref, job)  # the job as the submit (or the reattach) read it
        self.log.info("%s %s: %s", "Reattached to" if reattached else "Submitted", ref.title, seen.describe())
        if not self.wait_for_completion:
            identity.remember(ref, task_succeeded=True)
            return seen.result(self.kind)

        now = self.clock.wall()
        deadlines = Deadlines.for_job(
            job,
            submitted_at=identity.submitted_at(ref) if reattached else submitted_at,
            startup_timeout=self.wait_policy.startup_seconds,
            queue_timeout=self.wait_policy.queue_seconds,
            execution_timeout=self.execution_timeout,
            task_started_at=getattr(context["ti"], "start_date", None),
            now=now,
        )
        if self.deferrable and not seen.is_terminal:
            self._defer(hook, deadlines, reattached=reattached, gpus=gpus_per_replica(job), workers=worker_clusters)
        outcome = Outcome.from_event(self._wait(hook, ref, deadlines, worker_clusters))
        if reattached and identity.taken_over_job_vanished(ref, outcome):
            return self._submit_and_wait(hook, self.build_job_manifest(context, hook.default_namespace()), context)
        return self._finish(hook, outcome, context, logs_forwarded=True)

    def execute_complete(
        self, context: Context, event: dict[str, Any], job_uid: str | None = None, reattached: bool = False
    ) -> dict[str, Any]:
        """Resume after the trigger fired: the same ending as the sync path.

        ``job_uid`` is the uid of the job this task submitted (the event's job may be a replacement
        someone else created under the same name, which must not be deleted in our stead);
        ``reattached`` says the job was taken over from an earlier try rather than submitted by this one.
        """
        outcome = Outcome.from_event(event)  # the trigger's event, read back through the schema that wrote it
        self._job_ref = JobRef(self.kind, outcome.name, outcome.namespace, job_uid or outcome.ref.uid)
        hook = self.hook
        if reattached and self.identity(context).taken_over_job_vanished(self._job_ref, outcome):
            return self._submit_and_wait(hook, self.build_job_manifest(context, hook.default_namespace()), context)
        return self._finish(hook, outcome, context, logs_forwarded=False)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        # If the scheduler's own deferral timeout beat the trigger's deadline, the job must still go,
        # unless it has finished meanwhile (then deleting it would only lose its pods' logs).
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except TaskDeferralTimeout:
            job = self.identity(context).own_job_from_xcom(context["ti"])
            if self.cleanup_policy.on_timeout and job is not None and not JobView.of(job).is_terminal:
                metadata = job["metadata"]
                self.log.warning(
                    "Deferral timed out: deleting %s %s/%s", self.kind, metadata["namespace"], metadata["name"]
                )
                self.hook.delete_job(self.kind, metadata["name"], metadata["namespace"], uid=metadata.get("uid"))
            raise

    def on_kill(self) -> None:
        """The task was killed while waiting in sync mode (or timed out): delete its job and, for a job
        MultiKueue dispatched to a mapped worker cluster, say whether Kueue removed its copy there."""
        if not self.cleanup_policy.on_kill or self._keep_job_on_kill:
            return
        ref = self._job_ref or self._job_of_an_interrupted_claim()
        if ref is None:
            return
        self.log.info("Task killed: deleting %s", ref.title)
        delete_killed_job(self.hook, ref, self.worker_cluster_map(strict=False), self.clock, self.log)

    def _job_of_an_interrupted_claim(self) -> JobRef | None:
        """The job a submission killed half-way may have created (the create can land before the kill, and
        no retry may come to take it over): only a job of that name carrying this task instance's label."""
        identity, name, namespace = self._claiming or (None, "", "")
        job = identity.own_job(name, namespace) if identity is not None else None
        return None if job is None else JobRef(self.kind, name, namespace, job["metadata"].get("uid"))

    # -- waiting --------------------------------------------------------------------------------------

    def _defer(
        self, hook: TrainingJobHook, deadlines: Deadlines, *, reattached: bool, gpus: dict[str, int], workers: Any
    ) -> None:
        ref = self._job_ref
        assert ref is not None
        trigger = trigger_for(
            ref,
            deadlines,
            wait_policy=self.wait_policy,
            cleanup_policy=self.cleanup_policy,
            stream_logs=self.stream_logs,
            gpus_per_replica=gpus,
            connection=hook.trigger_connection(),
            worker_clusters=workers,
        )
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            kwargs={"job_uid": ref.uid, "reattached": reattached},
            timeout=deadlines.deferral_timeout(now=self.clock.wall()),
        )

    def _wait(self, hook: TrainingJobHook, ref: JobRef, deadlines: Deadlines, workers: Any) -> dict[str, Any]:
        return poll_until_over(
            hook,
            self.job_kind,
            ref,
            deadlines,
            poll_interval=self.wait_policy.poll_seconds,
            api_failure_tolerance=self.wait_policy.api_failure_tolerance_seconds,
            log_replicas=self.log_replicas,
            log=self.log,
            clock=self.clock,
            worker_clusters=workers,
        )

    # -- the ending, shared by both modes -------------------------------------------------------------

    def _finish(
        self, hook: TrainingJobHook, outcome: Outcome, context: Context, *, logs_forwarded: bool
    ) -> dict[str, Any]:
        assert self._job_ref is not None
        ending = JobEnding(
            hook=hook,
            ref=self._job_ref,
            kind=self.job_kind,
            cleanup=self.cleanup_policy,
            log_replicas=self.log_replicas,
            stream_logs=self.stream_logs,
            identity=self.identity(context),
            last_try=context["ti"].try_number > (self.retries or 0),
            log=self.log,
            read_from_pods=self.read_from_pods,
            clock=self.clock,
            worker_clusters=self.worker_cluster_map(strict=False),
        )
        return self.record_ending(context, lambda: ending.finish(outcome, logs_forwarded=logs_forwarded))

    def read_from_pods(self, result: dict[str, Any], pods: list[dict[str, Any]] | None) -> dict[str, Any]:
        """A success's ``result`` with what this task reads from the job's final pods (listed once, by the
        ending; None when they could not be listed); a subclass adds to it (the decorators' return value)."""
        return result
