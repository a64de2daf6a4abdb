"""``MPIJobOperator``: an MPIJob (``kubeflow.org/v2beta1``) through a whole (faked) run."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_disttrain.exceptions import InvalidJobSpecError, JobFailedError
from airflow_provider_disttrain.job.kinds import JOB_ROLE_LABEL
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.parameters import MPIOptions, WaitPolicy
from tests.unit.fakes import (
    OOM_KILLED,
    FakeTrainingJobHook,
    failed_status,
    make_context,
    make_pod,
    running_status,
    succeeded_status,
    with_hook,
)

LAUNCHER_COMMAND = ["mpirun", "-np", "4", "python", "train.py"]


def make_operator(hook: FakeTrainingJobHook, **kwargs: Any) -> MPIJobOperator:
    arguments: dict[str, Any] = {
        "task_id": "horovod",
        "image": "horovod:1",
        "command": LAUNCHER_COMMAND,
        "num_workers": 2,
        "wait_policy": WaitPolicy(poll_interval=0.01),
    }
    arguments.update(kwargs)
    return with_hook(MPIJobOperator(**arguments), hook)


def test_runs_an_mpijob_with_a_launcher_and_ssh_workers() -> None:
    hook = FakeTrainingJobHook(
        progression=[running_status(workers=2, leader="Launcher"), succeeded_status(workers=2, leader="Launcher")]
    )

    result = make_operator(
        hook,
        mpi_options=MPIOptions(
            slots_per_worker=2,
            mpi_implementation="OpenMPI",
            launcher_creation_policy="WaitForWorkersReady",
            run_launcher_as_worker=False,
        ),
        replica_resources={"Worker": {"limits": {"nvidia.com/gpu": 2}}, "Launcher": {"limits": {"cpu": "1"}}},
    ).execute(make_context())

    assert result["kind"] == "MPIJob"
    assert result["state"] == "succeeded"
    assert result["replica_statuses"]["Launcher"]["succeeded"] == 1
    assert hook.called("create_job")[0][0][0] == "MPIJob"
    manifest = hook.submitted_manifest()
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    spec = manifest["spec"]
    assert spec["slotsPerWorker"] == 2
    assert spec["mpiImplementation"] == "OpenMPI"
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runLauncherAsWorker"] is False
    launcher = spec["mpiReplicaSpecs"]["Launcher"]
    worker = spec["mpiReplicaSpecs"]["Worker"]
    assert (launcher["replicas"], worker["replicas"]) == (1, 2)
    [launcher_container] = launcher["template"]["spec"]["containers"]
    [worker_container] = worker["template"]["spec"]["containers"]
    assert launcher_container["command"] == LAUNCHER_COMMAND
    assert worker_container["command"] == ["/usr/sbin/sshd", "-De"]  # workers serve SSH to mpirun
    assert launcher_container["resources"] == {"limits": {"cpu": "1"}}
    assert worker_container["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert launcher["restartPolicy"] in ("Never", "OnFailure")


def test_failure_names_the_oom_killed_launcher() -> None:
    hook = FakeTrainingJobHook(progression=[running_status(leader="Launcher"), failed_status(leader="Launcher")])
    hook.pods["mpi-job"] = [
        make_pod(
            "mpi-job",
            "launcher",
            0,
            phase="Failed",
            container="mpi",
            terminated=OOM_KILLED,
            replica_label=JOB_ROLE_LABEL,
        ),
        make_pod("mpi-job", "worker", 0, container="mpi", replica_label=JOB_ROLE_LABEL),
    ]
    hook.logs["mpi-job-launcher-x1"] = "mpirun: rank 0 killed\n"

    with pytest.raises(JobFailedError) as raised:
        make_operator(hook, job_name="mpi-job").execute(make_context())

    message = str(raised.value)
    assert "launcher-0 (mpi-job-launcher-x1): Failed - container mpi: OOMKilled, exit code 137" in message
    assert "  | mpirun: rank 0 killed" in message
    # The launcher's own Job is among the objects whose events are read.
    assert "mpi-job-launcher" in hook.called("list_warning_events")[0][0][1]


def test_an_mpijob_without_image_is_rejected_before_any_api_call() -> None:
    hook = FakeTrainingJobHook()

    with pytest.raises(InvalidJobSpecError) as raised:
        make_operator(hook, image=None).execute(make_context())

    assert raised.value.field.endswith(".image")
    assert raised.value.field.startswith("spec.mpiReplicaSpecs.")
    assert hook.calls == []


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"mpi_options": {"slots_per_worker": 0}}, "mpi_options.slots_per_worker"),
        ({"mpi_options": {"slots_per_worker": True}}, "mpi_options.slots_per_worker"),
        ({"mpi_options": {"slots_per_worker": "2"}}, "mpi_options.slots_per_worker"),
        ({"mpi_options": {"mpi_implementation": "X"}}, "mpi_options.mpi_implementation"),
        ({"mpi_options": {"launcher_creation_policy": "Eventually"}}, "mpi_options.launcher_creation_policy"),
        ({"num_workers": 0}, "num_workers"),
    ],
)
def test_invalid_parameters_fail_when_the_dag_is_parsed(kwargs: dict[str, Any], parameter: str) -> None:
    with pytest.raises(ValueError, match=rf"^{parameter}: "):
        if "mpi_options" in kwargs:  # the value checks itself when it is made
            kwargs = {"mpi_options": MPIOptions(**kwargs["mpi_options"])}
        MPIJobOperator(task_id="t", image="i", **kwargs)


@pytest.mark.parametrize("name", ["slots_per_worker", "mpi_implementation", "launcher_creation_policy"])
def test_a_flat_mpi_keyword_is_refused_naming_its_new_place(name: str) -> None:
    """Issue 27: the MPI-only fields are one ``MPIOptions`` value; the old keyword says where it went."""
    with pytest.raises(TypeError, match=rf"^MPIJobOperator: {name}: .*{name} is now mpi_options=MPIOptions\({name}="):
        MPIJobOperator(task_id="t", image="i", **{name: 2})


def test_mpi_options_must_be_an_mpioptions() -> None:
    with pytest.raises(TypeError, match=r"^mpi_options: expected a MPIOptions, got dict"):
        MPIJobOperator(task_id="t", image="i", mpi_options={"slots_per_worker": 2})


def test_the_kind_is_mpijob_and_another_kind_is_refused_not_dropped() -> None:
    assert MPIJobOperator(task_id="t", image="i").kind == "MPIJob"
    assert MPIJobOperator(task_id="u", image="i", kind="MPIJob").kind == "MPIJob"
    with pytest.raises(ValueError, match=r"^kind: MPIJobOperator runs MPIJobs, not PyTorchJobs"):
        MPIJobOperator(task_id="v", image="i", kind="PyTorchJob")


def test_the_mpi_choices_are_the_kinds_tables() -> None:
    """One list of allowed values: what the parameters accept is what the manifest validation accepts."""
    from airflow_provider_disttrain import parameters as mpi_job
    from airflow_provider_disttrain.job.kinds import get_job_kind

    choices = dict(get_job_kind("MPIJob").spec_choices)

    assert tuple(sorted(choices["mpiImplementation"])) == mpi_job.MPI_IMPLEMENTATIONS
    assert tuple(sorted(choices["launcherCreationPolicy"])) == mpi_job.LAUNCHER_CREATION_POLICIES
    for value in choices["mpiImplementation"]:
        assert MPIOptions(mpi_implementation=value).mpi_implementation == value
    with pytest.raises(
        ValueError, match=r"^mpi_options.mpi_implementation: 'OpenMPI5' is not one of Intel, MPICH, OpenMPI"
    ):
        MPIOptions(mpi_implementation="OpenMPI5")
