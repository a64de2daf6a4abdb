"""The table of Kubeflow training job kinds.

Everything that differs between job kinds lives here as data, so that the manifest builder, the
status reader, the hooks and the operators never branch on a kind's name (tests/unit/test_layers.py
greps for such branches). A ``JobKind`` holds its API resource (an ``ApiResource``,
``kube/resources.py``), what the builder adds (``BuildDefaults``), how its status reads
(``StatusShape``) and how its pods are labelled (``PodLabels``), beside the replica rules.
Adding a kind that shares the training-operator's status shape is one entry in ``JOB_KINDS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_disttrain.kube.resources import ApiResource

# Pod labels set by the Kubeflow operators; both operators share the job-name label.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"

# Pod labels of a Kubeflow Trainer v2 TrainJob, which runs as a JobSet of the same name (JobSet
# v0.12 api/jobset/v1alpha2/jobset_types.go: JobSetNameKey, ReplicatedJobNameKey, JobIndexKey) of
# Indexed batch Jobs (k8s.io/api batch/v1 JobCompletionIndexAnnotation, also set as a pod label).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class StatusShape:
    """How a kind's operator writes the job's status."""

    success_condition: str = "Succeeded"
    """The condition type that, true, means the job succeeded (a TrainJob's is ``Complete``)."""
    replica_statuses_key: str = "replicaStatuses"
    """Status field with the per-replica counters (active, succeeded, failed)."""
    replica_statuses_list_key: str | None = None
    """None when that field is a map keyed by replica type; else it is a list and this names the key
    field of its entries (a TrainJob's ``jobsStatus[].name``, one entry per replicated job)."""
    running_counters: tuple[str, ...] = ()
    """Counters that, non-zero in a replica's status, mean the job runs. Empty: the conditions say
    (``Running``). A TrainJob has no such condition; its ``jobsStatus[].ready`` counts child Jobs whose
    pods all run or completed (``active`` also counts Jobs whose pods are still Pending)."""
    has_times: bool = True
    """Whether the status has ``startTime``/``completionTime``; if not, they are read from conditions."""
    suspension_without_history_reason: str | None = None
    """The reason of a ``Running=False`` condition the operator writes on every suspension, also of a job
    that never ran (the mpi-operator's ``MPIJobSuspended``): such a condition does not show the job ran."""
    trainer_status_key: str | None = None
    """Status field where the trainer reports its own progress (a TrainJob's ``trainerStatus``: percentage,
    remaining seconds, metrics; Kubeflow Trainer's alpha ``TrainJobStatus`` gate); None: the kind has none."""


@dataclass(frozen=True)
class PodLabels:
    """The labels by which a kind's pods are found and told apart."""

    job_name: str = JOB_NAME_LABEL
    """Pod label whose value is the job's name (how its pods are found)."""
    replica_type: str = REPLICA_TYPE_LABEL
    """Pod label naming the replica type; its value is the replica type in lower case."""
    replica_index: str = REPLICA_INDEX_LABEL
    """Pod label with the pod's index within its replica type."""
    leader_extra: tuple[tuple[str, str], ...] = ()
    """Further labels the leader pod carries, beside its replica type and index 0."""


@dataclass(frozen=True)
class BuildDefaults:
    """What the manifest builder adds for a kind when it builds a job from the operator's parameters."""

    port: int | None = None
    """The container port the kind's operator expects (named ``port_name``), when the template has none."""
    port_name: str | None = None
    builds_leader: bool = False
    """Whether a job built from parameters gets the kind's ``leader_replica`` beside the workers (always 1
    replica); False: workers only."""
    restart_policy: str = "OnFailure"
    leader_gets_accelerators: bool = True
    """Whether the per-replica GPU request applies to the leader too (not to an MPI launcher)."""
    worker_command: tuple[str, ...] | None = None
    """Command for worker pods when the builder's command is meant for the leader only (MPI sshd)."""


@dataclass(frozen=True)
class JobKind:
    """What the provider needs to know about one Kubeflow job kind."""

    resource: ApiResource
    """The job's API resource (its ``kind`` is the kind's name, e.g. ``PyTorchJob``)."""
    replica_specs_key: str | None
    """Spec field holding the replica specs, e.g. ``pytorchReplicaSpecs``; None for a TrainJob, whose
    pods come from its runtime's replicated jobs."""
    container_name: str
    """Container name the operator looks for in each replica's pod template (and the builder's name)."""
    leader_replica: str | None
    """Replica whose pod speaks for the job (logs, exit reason); None means worker 0."""
    builder: BuildDefaults
    """What the builder makes of the operator's parameters for this kind."""
    replica_types: frozenset[str] = frozenset({"Master", "Worker"})
    """Replica types the operator accepts in the replica specs."""
    worker_replica: str = "Worker"
    status: StatusShape = StatusShape()
    pod_labels: PodLabels = PodLabels()
    restart_policies: frozenset[str] = frozenset({"Always", "OnFailure", "Never", "ExitCode"})
    supports_elastic: bool = False
    spec_choices: tuple[tuple[str, frozenset[str]], ...] = ()
    """Allowed values of enum-like spec fields, by dotted path under ``spec``."""
    requires_named_container: bool = True
    """Whether the operator ignores a pod template without a container of that name."""
    leader_aliases: frozenset[str] = frozenset()
    """Replica types that play the leader's part under another name (TFJob: Master, Chief's older name)."""
    normalises_replica_types: bool = True
    """Whether the operator reads replica types case-insensitively (the training-operator's defaulter
    renames ``worker`` to ``Worker``); the mpi-operator matches them exactly."""
    unindexed_replicas: frozenset[str] = frozenset()
    """Replica types whose pods carry no replica index (the MPI launcher is a batch Job's pod)."""
    follows_worker_count: bool = False
    """Whether running pods adapt when the Worker count changes without an elastic policy (the
    mpi-operator rewrites the hostfile and discover_hosts.sh that elastic Horovod reads)."""
    suspend_path: tuple[str, ...] = ("spec", "runPolicy", "suspend")
    """Where ``suspend`` lives in the job (runPolicy in the training-operator's and the mpi-operator's)."""
    node_count_path: tuple[str, ...] | None = None
    """For a kind without replica specs, where its number of worker pods is set (TrainJob numNodes)."""
    scalable_while_suspended: bool = True
    """Whether the worker count may be changed at all (a TrainJob's ``spec.trainer`` is immutable)."""
    operator: str | None = None
    """The operator class that builds this kind, when the generic builder cannot (no replica specs)."""
    event_object_suffixes: tuple[str, ...] = ()
    """Suffixes of the job's name naming other objects whose events explain it (the MPI launcher's batch
    Job, ``<job>-launcher``), read beside the job's and its pods' events."""
    spec_integer_minimums: tuple[tuple[str, int], ...] = ()
    """Integer ``spec`` fields and their least value (an MPIJob's ``slotsPerWorker`` >= 1)."""
    leader_required: bool = False
    """Whether the kind's controller or webhook refuses a job without its leader replica (an MPIJob's
    Launcher, an XGBoostJob's Master): a manifest without it gets the leader built from the operator's
    parameters (``image``, ``command``), or is refused before anything is sent."""
    refusal_event_reasons: frozenset[str] = frozenset()
    """Reasons of the Warning events with which the kind's controller refuses a job it will never run,
    writing no condition (the mpi-operator's ``ValidationError``): a wait ends at once on one of them.
    The training-operator v1.9 checks its kinds in its admission webhook (a 403 at create, read by
    ``hooks.rejections``); its controllers refuse none of them by event (``<Kind>FailedValidation`` is
    written only for its own v1 MPIJob, which the provider does not submit), so they have none here."""
    pod_name_suffix: str = "-{replica}-{index}"
    """What the operator appends to the job's name to name a pod (and its service), for the longest
    name that fits: the Kubeflow operators' ``<job>-<replica>-<index>``; JobSet's
    ``<jobset>-<replicated job>-<job index>-<pod index>`` plus the batch Job's 5 random characters
    (JobSet v0.12 pkg/util/placement GenPodName, checked in its webhook)."""

    @property
    def kind(self) -> str:
        return self.resource.kind

    @property
    def built_leader(self) -> str | None:
        """The leader replica a job built from parameters gets beside its workers, if the kind builds one."""
        return self.leader_replica if self.builder.builds_leader else None

    @property
    def has_replica_specs(self) -> bool:
        """Whether the job lists its replicas itself (v1 kinds, MPIJob); a TrainJob's come from its runtime."""
        return self.replica_specs_key is not None

    def main_container_name(self, pod: Mapping[str, Any]) -> str | None:
        """The container of a replica's pod that is the job's: the one of ``container_name``, else the
        first (an MPIJob may name its containers freely); None for a pod without containers."""
        names = [container.get("name") for container in (pod.get("spec") or {}).get("containers") or []]
        return self.container_name if self.container_name in names else (names[0] if names else None)

    def canonical_replica_type(self, name: str) -> str | None:
        """The replica type the operator reads ``name`` as, or None when it names none of this kind's.

        The training-operator's ``setTypeNameToCamelCase`` (pkg/apis/kubeflow.org/v1/defaulting_utils.go)
        renames a key that ``strings.EqualFold`` matches to one of the kind's types; ``casefold`` is
        Python's counterpart for these ASCII names.
        """
        if name in self.replica_types:
            return name
        if self.normalises_replica_types:
            for known in sorted(self.replica_types):
                if known.casefold() == str(name).casefold():
                    return known
        return None

    def replica_label_value(self, replica_type: str) -> str:
        return replica_type.lower()

    def worker_replicas_path(self) -> tuple[str, ...]:
        """Path of the Worker replica count inside the job object (what the scale operator patches)."""
        if self.replica_specs_key is None:
            assert self.node_count_path is not None, f"{self.kind} has neither replica specs nor a node count"
            return self.node_count_path
        return ("spec", self.replica_specs_key, self.worker_replica, "replicas")

    def builder_name(self) -> str:
        """How a DAG author submits this kind: its own operator, or the generic one."""
        return self.operator or f"TrainingJobOperator(kind={self.kind!r})"


_V1_GROUP = "kubeflow.org"
_TRAINER_GROUP = "trainer.kubeflow.org"

JOB_KINDS: dict[str, JobKind] = {
    k.kind: k
    for k in (
        JobKind(
            resource=ApiResource("PyTorchJob", _V1_GROUP, "v1", "pytorchjobs"),
            replica_specs_key="pytorchReplicaSpecs",
            container_name="pytorch",
            leader_replica="Master",
            builder=BuildDefaults(port=23456, port_name="pytorchjob-port", builds_leader=True),
            supports_elastic=True,
            spec_choices=(("elasticPolicy.rdzvBackend", frozenset({"c10d", "etcd", "etcd-v2"})),),
        ),
        JobKind(
            resource=ApiResource("MPIJob", _V1_GROUP, "v2beta1", "mpijobs"),
            replica_specs_key="mpiReplicaSpecs",
            # mpi-operator v2beta1 does not look the container up by name; the first one is used.
            container_name="mpi",
            requires_named_container=False,
            leader_replica="Launcher",
            builder=BuildDefaults(
                builds_leader=True,
                restart_policy="Never",
                leader_gets_accelerators=False,
                worker_command=("/usr/sbin/sshd", "-De"),
            ),
            restart_policies=frozenset({"Never", "OnFailure"}),
            pod_labels=PodLabels(replica_type=JOB_ROLE_LABEL),
            replica_types=frozenset({"Launcher", "Worker"}),
            normalises_replica_types=False,
            unindexed_replicas=frozenset({"Launcher"}),
            follows_worker_count=True,
            spec_choices=(
                ("mpiImplementation", frozenset({"OpenMPI", "Intel", "MPICH"})),
                ("launcherCreationPolicy", frozenset({"AtStartup", "WaitForWorkersReady"})),
            ),
            event_object_suffixes=("-launcher",),
            # mpi-operator v0.8 validates in its controller (pkg/controller/mpi_job_controller.go syncHandler:
            # ValidateMPIJob, then a Warning event ``ValidationError``, no condition, no requeue); its
            # validation requires the Launcher replica spec (pkg/apis/kubeflow/validation).
            leader_required=True,
            refusal_event_reasons=frozenset({"ValidationError"}),
            status=StatusShape(suspension_without_history_reason="MPIJobSuspended"),
            spec_integer_minimums=(("slotsPerWorker", 1),),
        ),
        JobKind(
            resource=ApiResource("TFJob", _V1_GROUP, "v1", "tfjobs"),
            replica_specs_key="tfReplicaSpecs",
            container_name="tensorflow",
            leader_replica="Chief",
            builder=BuildDefaults(port=2222, port_name="tfjob-port"),
            # Master is the older name of Chief, still accepted (IsChiefOrMaster); a job has one or the other.
            replica_types=frozenset({"Chief", "Master", "PS", "Worker", "Evaluator"}),
            leader_aliases=frozenset({"Master"}),
        ),
        JobKind(
            resource=ApiResource("XGBoostJob", _V1_GROUP, "v1", "xgboostjobs"),
            replica_specs_key="xgbReplicaSpecs",
            container_name="xgboost",
            leader_replica="Master",
            builder=BuildDefaults(port=9999, port_name="xgboostjob-port", builds_leader=True),
            # The training-operator v1.9 webhook: "spec.xgbReplicaSpecs[Master]: Required value: must be present".
            leader_required=True,
        ),
        JobKind(
            resource=ApiResource("PaddleJob", _V1_GROUP, "v1", "paddlejobs"),
            replica_specs_key="paddleReplicaSpecs",
            container_name="paddle",
            leader_replica="Master",
            builder=BuildDefaults(port=36543, port_name="master"),
        ),
        JobKind(
            resource=ApiResource("JAXJob", _V1_GROUP, "v1", "jaxjobs"),
            replica_specs_key="jaxReplicaSpecs",
            container_name="jax",
            leader_replica=None,
            builder=BuildDefaults(port=6666, port_name="jaxjob-port"),
            replica_types=frozenset({"Worker"}),
        ),
        # Kubeflow Trainer v2.3 (github.com/kubeflow/trainer/v2 pkg/apis/trainer/v1alpha1/trainjob_types.go).
        # The pods are the JobSet's: the trainer step is the replicated job ``node`` (constants.Node, the
        # name every shipped runtime gives it), one Indexed Job of numNodes pods; node 0 is the leader
        # (JobSet's placement.IsLeaderPod: completion index 0).
        JobKind(
            resource=ApiResource("TrainJob", _TRAINER_GROUP, "v1alpha1", "trainjobs"),
            replica_specs_key=None,
            container_name="node",
            leader_replica="node",
            builder=BuildDefaults(),
            replica_types=frozenset({"node"}),
            worker_replica="node",
            restart_policies=frozenset(),
            normalises_replica_types=False,
            status=StatusShape(
                success_condition="Complete",
                replica_statuses_key="jobsStatus",
                replica_statuses_list_key="name",
                running_counters=("ready", "succeeded"),
                has_times=False,
                trainer_status_key="trainerStatus",
            ),
            pod_labels=PodLabels(
                job_name=JOBSET_NAME_LABEL,
                replica_type=REPLICATED_JOB_LABEL,
                replica_index=COMPLETION_INDEX_LABEL,
                leader_extra=((JOB_INDEX_LABEL, "0"),),
            ),
            suspend_path=("spec", "suspend"),
            node_count_path=("spec", "trainer", "numNodes"),
            scalable_while_suspended=False,
            operator="TrainJobOperator",
            # Each replicated job of Trainer's runtimes has one replica (job index 0).
            pod_name_suffix="-{replica}-0-{index}-xxxxx",
        ),
    )
}

# The runtimes a TrainJob's ``spec.runtimeRef`` may name (Trainer v2.3 CRDs in manifests/base/crds), by
# kind. A TrainingRuntime must be in the TrainJob's namespace.
TRAINING_RUNTIME_KINDS: dict[str, ApiResource] = {
    runtime.kind: runtime
    for runtime in (
        ApiResource("ClusterTrainingRuntime", _TRAINER_GROUP, "v1alpha1", "clustertrainingruntimes", namespaced=False),
        ApiResource("TrainingRuntime", _TRAINER_GROUP, "v1alpha1", "trainingruntimes"),
    )
}


def get_job_kind(kind: str | JobKind) -> JobKind:
    """Look a kind up by name (case-insensitive), with an error that lists the known kinds."""
    if isinstance(kind, JobKind):
        return kind
    for known in JOB_KINDS.values():
        if known.kind.lower() == str(kind).lower():
            return known
    raise ValueError(f"kind: unknown job kind {kind!r}; expected one of {', '.join(JOB_KINDS)}")


# The kinds that share the training-operator's status shape all read the same; a job object without
# a known ``kind`` (a trimmed test double, say) is read as one of them.
_DEFAULT_STATUS_KIND = "PyTorchJob"


def kind_of(job: Mapping[str, Any]) -> JobKind:
    """The table entry for a job object, from its own ``kind`` field (the API server always sets it)."""
    name = str(job.get("kind") or "")
    return JOB_KINDS.get(name) or JOB_KINDS[_DEFAULT_STATUS_KIND]
