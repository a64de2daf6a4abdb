"""The table of job kinds: what differs between PyTorchJob, MPIJob, TFJob, ... as data."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_provider_disttrain.job.kinds import (
    JOB_KINDS,
    JOB_ROLE_LABEL,
    REPLICA_TYPE_LABEL,
    TRAINING_RUNTIME_KINDS,
    BuildDefaults,
    JobKind,
    get_job_kind,
    kind_of,
)
from airflow_provider_disttrain.kube.resources import ApiResource

# What the Kubeflow operators' CRDs and defaulting code say about each kind.
EXPECTED = {
    # kind: (apiVersion, plural, replica specs key, container, port, port name, leader)
    "PyTorchJob": (
        "kubeflow.org/v1",
        "pytorchjobs",
        "pytorchReplicaSpecs",
        "pytorch",
        23456,
        "pytorchjob-port",
        "Master",
    ),
    "MPIJob": ("kubeflow.org/v2beta1", "mpijobs", "mpiReplicaSpecs", "mpi", None, None, "Launcher"),
    "TFJob": ("kubeflow.org/v1", "tfjobs", "tfReplicaSpecs", "tensorflow", 2222, "tfjob-port", "Chief"),
    "XGBoostJob": ("kubeflow.org/v1", "xgboostjobs", "xgbReplicaSpecs", "xgboost", 9999, "xgboostjob-port", "Master"),
    "PaddleJob": ("kubeflow.org/v1", "paddlejobs", "paddleReplicaSpecs", "paddle", 36543, "master", "Master"),
    "JAXJob": ("kubeflow.org/v1", "jaxjobs", "jaxReplicaSpecs", "jax", 6666, "jaxjob-port", None),
    # Trainer v2.3: no replica specs; the trainer step's replicated job and container are both "node".
    "TrainJob": ("trainer.kubeflow.org/v1alpha1", "trainjobs", None, "node", None, None, "node"),
}


def test_the_table_has_exactly_the_supported_kinds():
    assert set(JOB_KINDS) == set(EXPECTED)
    assert all(name == kind.kind for name, kind in JOB_KINDS.items())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kind_matches_the_operators_crd(name):
    kind = JOB_KINDS[name]
    api_version, plural, specs_key, container, port, port_name, leader = EXPECTED[name]

    assert kind.resource.api_version == api_version
    assert kind.resource.plural == plural
    assert kind.replica_specs_key == specs_key
    assert kind.container_name == container
    assert kind.builder.port == port
    assert kind.builder.port_name == port_name
    assert kind.leader_replica == leader


@pytest.mark.parametrize("kind", list(JOB_KINDS.values()), ids=list(JOB_KINDS))
def test_every_kind_is_internally_consistent(kind):
    assert kind.worker_replica in kind.replica_types
    assert kind.leader_replica is None or kind.leader_replica in kind.replica_types
    assert kind.built_leader is None or kind.built_leader in kind.replica_types
    if kind.replica_specs_key is not None:  # a TrainJob's restart policy is its runtime's
        assert kind.builder.restart_policy in kind.restart_policies
    else:
        assert kind.node_count_path is not None and kind.operator is not None
    assert kind.resource.plural == kind.kind.lower() + "s"


def test_only_pytorchjob_supports_elastic_training():
    assert [name for name, kind in JOB_KINDS.items() if kind.supports_elastic] == ["PyTorchJob"]


def test_mpijob_differs_where_the_mpi_operator_differs():
    mpi = JOB_KINDS["MPIJob"]

    assert mpi.replica_types == frozenset({"Launcher", "Worker"})
    assert mpi.restart_policies == frozenset({"Never", "OnFailure"})
    assert mpi.builder.restart_policy == "Never"
    assert mpi.pod_labels.replica_type == JOB_ROLE_LABEL
    assert mpi.builder.leader_gets_accelerators is False
    assert mpi.builder.worker_command == ("/usr/sbin/sshd", "-De")
    assert mpi.requires_named_container is False
    assert dict(mpi.spec_choices)["mpiImplementation"] == frozenset({"OpenMPI", "Intel", "MPICH"})


def test_v1_kinds_use_the_replica_type_label():
    for name, kind in JOB_KINDS.items():
        if kind.resource.group == "kubeflow.org" and name != "MPIJob":
            assert kind.pod_labels.replica_type == REPLICA_TYPE_LABEL, name
            assert kind.requires_named_container, name


def test_pytorch_elastic_rendezvous_backends():
    assert dict(JOB_KINDS["PyTorchJob"].spec_choices)["elasticPolicy.rdzvBackend"] == frozenset(
        {"c10d", "etcd", "etcd-v2"}
    )


@pytest.mark.parametrize(("name", "expected"), [("PyTorchJob", "Master"), ("MPIJob", "Launcher"), ("TFJob", None)])
def test_built_leader(name, expected):
    assert JOB_KINDS[name].built_leader == expected


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("PyTorchJob", ("spec", "pytorchReplicaSpecs", "Worker", "replicas")),
        ("MPIJob", ("spec", "mpiReplicaSpecs", "Worker", "replicas")),
        ("TFJob", ("spec", "tfReplicaSpecs", "Worker", "replicas")),
        ("TrainJob", ("spec", "trainer", "numNodes")),
    ],
)
def test_worker_replicas_path(name, path):
    assert JOB_KINDS[name].worker_replicas_path() == path


@pytest.mark.parametrize(("replica", "label"), [("Master", "master"), ("Worker", "worker"), ("Launcher", "launcher")])
def test_replica_label_value_is_lower_case(replica, label):
    assert JOB_KINDS["PyTorchJob"].replica_label_value(replica) == label


@pytest.mark.parametrize("spelling", ["PyTorchJob", "pytorchjob", "PYTORCHJOB", "pyTorchJob"])
def test_get_job_kind_is_case_insensitive(spelling):
    assert get_job_kind(spelling) is JOB_KINDS["PyTorchJob"]


def test_get_job_kind_passes_a_job_kind_through():
    tfjob = JOB_KINDS["TFJob"]
    custom = dataclasses.replace(tfjob, resource=dataclasses.replace(tfjob.resource, plural="customtfjobs"))
    assert get_job_kind(custom) is custom


@pytest.mark.parametrize("unknown", ["MXJob", "PyTorch", "", "kubeflow.org/v1"])
def test_get_job_kind_rejects_an_unknown_kind_and_lists_the_known_ones(unknown):
    with pytest.raises(ValueError, match=r"^kind: unknown job kind") as excinfo:
        get_job_kind(unknown)
    message = str(excinfo.value)
    assert repr(unknown) in message
    for name in EXPECTED:
        assert name in message


def test_job_kind_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        JOB_KINDS["PyTorchJob"].resource.plural = "x"  # type: ignore[misc]


def test_a_job_kind_defaults_to_master_and_worker():
    kind = JobKind(
        resource=ApiResource("DemoJob", "example.org", "v1alpha1", "demojobs"),
        replica_specs_key="demoReplicaSpecs",
        container_name="demo",
        leader_replica="Master",
        builder=BuildDefaults(builds_leader=True),
    )
    assert kind.resource.api_version == "example.org/v1alpha1"
    assert kind.replica_types == frozenset({"Master", "Worker"})
    assert kind.restart_policies == frozenset({"Always", "OnFailure", "Never", "ExitCode"})
    assert kind.builder.restart_policy == "OnFailure"


def test_trainjob_differs_where_trainer_v2_differs():
    """Each value as Trainer v2.3 and JobSet v0.12 define it (pkg/apis/trainer/v1alpha1/trainjob_types.go,
    JobSet api/jobset/v1alpha2/jobset_types.go)."""
    train_job = JOB_KINDS["TrainJob"]

    assert train_job.status.success_condition == "Complete"
    assert (train_job.status.replica_statuses_key, train_job.status.replica_statuses_list_key) == ("jobsStatus", "name")
    assert train_job.pod_labels.job_name == "jobset.sigs.k8s.io/jobset-name"
    assert train_job.pod_labels.replica_type == "jobset.sigs.k8s.io/replicatedjob-name"
    assert train_job.pod_labels.replica_index == "batch.kubernetes.io/job-completion-index"
    assert train_job.pod_labels.leader_extra == (("jobset.sigs.k8s.io/job-index", "0"),)
    assert train_job.suspend_path == ("spec", "suspend")
    assert train_job.scalable_while_suspended is False
    assert train_job.status.has_times is False
    assert train_job.builder_name() == "TrainJobOperator"


def test_v1_and_mpi_kinds_keep_suspend_in_the_run_policy():
    for name, kind in JOB_KINDS.items():
        if name != "TrainJob":
            assert kind.suspend_path == ("spec", "runPolicy", "suspend"), name
            assert kind.status.success_condition == "Succeeded", name
            assert kind.builder_name() == f"TrainingJobOperator(kind={name!r})"


def test_kind_of_reads_the_object_s_own_kind():
    assert kind_of({"kind": "TrainJob"}) is JOB_KINDS["TrainJob"]
    assert kind_of({"kind": "MPIJob"}) is JOB_KINDS["MPIJob"]
    # Without a kind (or an unknown one) the training-operator's status shape applies.
    assert kind_of({}).status.success_condition == "Succeeded"
    assert kind_of({"kind": "Pod"}).status.replica_statuses_key == "replicaStatuses"


def test_training_runtime_kinds():
    assert {kind: (runtime.plural, runtime.namespaced) for kind, runtime in TRAINING_RUNTIME_KINDS.items()} == {
        "ClusterTrainingRuntime": ("clustertrainingruntimes", False),
        "TrainingRuntime": ("trainingruntimes", True),
    }
    assert {runtime.api_version for runtime in TRAINING_RUNTIME_KINDS.values()} == {"trainer.kubeflow.org/v1alpha1"}


def test_a_kind_added_to_the_table_alone_is_built_validated_submitted_and_waited_for(monkeypatch) -> None:
    """Adding a kind touches kinds.py only: a fake kind, one table entry, runs end to end through the
    generic operator (builder, validation, naming, the sync wait, the ending) without another change."""
    from dataclasses import replace

    from airflow_provider_disttrain.job import kinds
    from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
    from airflow_provider_disttrain.parameters import WaitPolicy
    from tests.unit.fakes import FakeTrainingJobHook, make_context, running_status, succeeded_status, with_hook

    fake = replace(
        kinds.JOB_KINDS["PyTorchJob"],
        resource=ApiResource("FakeJob", "fake.example.com", "v1alpha1", "fakejobs"),
        replica_specs_key="fakeReplicaSpecs",
        container_name="fake",
        builder=replace(kinds.JOB_KINDS["PyTorchJob"].builder, builds_leader=False),
        leader_replica=None,
        replica_types=frozenset({"Worker"}),
    )
    monkeypatch.setitem(kinds.JOB_KINDS, "FakeJob", fake)
    hook = FakeTrainingJobHook(progression=[running_status(leader="Worker"), succeeded_status(leader="Worker")])
    task = with_hook(
        TrainingJobOperator(
            task_id="train", kind="fakejob", image="t:1", num_workers=3, wait_policy=WaitPolicy(poll_interval=0.01)
        ),
        hook,
    )

    result = task.execute(make_context())

    [(args, _)] = hook.called("create_job")
    manifest = args[1]
    assert (manifest["apiVersion"], manifest["kind"]) == ("fake.example.com/v1alpha1", "FakeJob")
    worker = manifest["spec"]["fakeReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    assert worker["template"]["spec"]["containers"][0] == {
        "name": "fake",
        "image": "t:1",
        "ports": [{"name": fake.builder.port_name, "containerPort": fake.builder.port}],
    }
    assert (result["kind"], result["state"]) == ("FakeJob", "succeeded")
