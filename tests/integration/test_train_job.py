"""Kubeflow Trainer v2 TrainJobs through ``TrainJobOperator`` and the real Airflow runtime (``dag.test()``),
on the local control plane with the real Trainer v2.3.0 controller and JobSet v0.12.0, as the service
account bound to exactly the documented Role and ClusterRole."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_disttrain.manifest.train_job import PATCH_MANAGER
from airflow_provider_disttrain.parameters import WaitPolicy
from airflow_provider_disttrain.utils import telemetry
from tests.integration.conftest import NO_GPU_NODE, SYNC_TIMEOUT, unique_dag_id, with_defaults
from tests.integration.provider_requests import ProviderRequests

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
RUN_SECONDS = "disttrain.test/run-seconds"  # how long kwok keeps the pods Running

TRAIN_DAG = """
import datetime

import pendulum
from airflow.sdk import dag, task
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy
from airflow_provider_disttrain.operators.train_job import TrainJobOperator

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    train = TrainJobOperator(task_id="train", {operator_args})

    @task
    def check(result):
        assert result["state"] == "succeeded", result
        return result

    check(train.output)

pipeline()
"""


def train_dag(dag_id: str, **arguments: Any) -> str:
    defaults = {"runtime": "torch-distributed", "wait_policy": WaitPolicy(poll_interval=1, startup_timeout=120)}
    rendered = ", ".join(f"{key}={value!r}" for key, value in with_defaults(defaults, arguments).items())
    return TRAIN_DAG.format(dag_id=dag_id, operator_args=rendered)


class TrainJobs:
    """Admin-side reads of TrainJobs and their JobSet's pods, for assertions."""

    def __init__(self, jobs: Any) -> None:
        self.custom, self.core, self.wait_for = jobs.custom, jobs.core, jobs.wait_for

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def list(self, namespace: str) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs")["items"]

    def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name, patch)

    def pods(self, namespace: str, name: str) -> list[Any]:
        selector = f"jobset.sigs.k8s.io/jobset-name={name}"
        return self.core.list_namespaced_pod(namespace, label_selector=selector).items

    def conditions(self, namespace: str, name: str) -> dict[str, str]:
        job = self.get(namespace, name) or {}
        return {c["type"]: c["status"] for c in (job.get("status") or {}).get("conditions") or []}

    def ready_nodes(self, namespace: str, name: str) -> int:
        job = self.get(namespace, name) or {}
        return sum(entry.get("ready", 0) for entry in (job.get("status") or {}).get("jobsStatus") or [])


@pytest.fixture
def trainjobs(jobs: Any) -> TrainJobs:
    return TrainJobs(jobs)


@pytest.mark.xdist_group("gpus")  # runs a node of 1 GPU: with the other tests that hold GPUs, one at a time
@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
def test_trainjob_from_parameters_succeeds(namespace, run_dag, trainjobs, capfd, deferrable):
    dag_id = unique_dag_id("tj_params")
    source = train_dag(
        dag_id,
        image="busybox:1.36",
        command=["torchrun", "train.py"],
        env={"EPOCHS": "3"},
        num_nodes=2,
        gpus_per_node=1,
        labels={"team": "ml"},
        deferrable=deferrable,
    )
    result = run_dag(dag_id, source)

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert (summary["kind"], summary["state"], summary["namespace"]) == ("TrainJob", "succeeded", namespace)
    assert summary["replica_statuses"] == {"node": {"active": 0, "succeeded": 1, "failed": 0}}
    assert [c["type"] for c in summary["conditions"] if c["status"] == "True"] == ["Complete"]
    assert summary["duration_seconds"] is not None and summary["duration_seconds"] >= 0
    live = trainjobs.get(namespace, summary["name"])
    assert live["metadata"]["uid"] == summary["uid"]
    assert live["spec"]["trainer"]["numNodes"] == 2
    assert live["spec"]["trainer"]["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": "1"}}  # as the API stores it
    assert live["metadata"]["labels"]["disttrain.airflow.apache.org/dag-id"] == dag_id
    # The JobSet's two node pods ran the trainer's image with the provider's labels (the runtime patch).
    pods = trainjobs.pods(namespace, summary["name"])
    assert sorted(pod.metadata.labels["batch.kubernetes.io/job-completion-index"] for pod in pods) == ["0", "1"]
    assert all(pod.metadata.labels["team"] == "ml" for pod in pods)
    assert {pod.spec.containers[0].image for pod in pods} == {"busybox:1.36"}
    # Node 0's log (kwok's canned log) reached the task log.
    output = "".join(capfd.readouterr())
    assert f"[{summary['name']}-node-0-0-" in output
    assert "epoch 1 loss=0.5" in output


def test_trainjob_from_kubeflow_s_example_manifest_succeeds(namespace, run_dag, trainjobs, airflow_db):
    # Kubeflow's own example (examples/yaml/01-multi-node.yaml), kept next to the DAG as a template file.
    (airflow_db / "multi_node.yaml").write_text((FIXTURES / "manifests" / "trainjob.yaml").read_text())
    dag_id = unique_dag_id("tj_manifest")
    result = run_dag(
        dag_id, train_dag(dag_id, runtime=None, job_manifest="multi_node.yaml", num_nodes=2, deferrable=True)
    )

    assert result.state == "success", result.task_states
    summary = result.xcom("train")
    assert summary["name"].startswith("multi-node-example-")
    live = trainjobs.get(namespace, summary["name"])
    assert live["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert live["spec"]["trainer"]["numNodes"] == 2  # the parameter won over the example's 3
    assert live["spec"]["trainer"]["command"][0] == "torchrun"


def test_a_missing_runtime_fails_the_task_naming_it_and_creates_nothing(namespace, run_dag, trainjobs, capfd):
    dag_id = unique_dag_id("tj_noruntime")
    result = run_dag(dag_id, train_dag(dag_id, runtime="torch-distributted", image="busybox:1.36"))

    assert result.task_state("train") == "failed"
    output = "".join(capfd.readouterr())
    assert "runtime: ClusterTrainingRuntime 'torch-distributted' does not exist" in output
    assert trainjobs.list(namespace) == []


def fail_fast_runtime(jobs: Any, namespace: str) -> str:
    """A TrainingRuntime like torch-distributed whose node Job is not retried (backoffLimit 0), as a team
    that wants a failing run to fail at once writes one (the default, 6 retries with back-off, takes minutes)."""
    runtime = yaml.safe_load((FIXTURES / "runtimes" / "torch-distributed.yaml").read_text())
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": "torch-fail-fast"}
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 0
    jobs.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "trainingruntimes", runtime)
    return "torch-fail-fast"


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"disttrain.test/reason": "OOMKilled"}, "OOMKilled, exit code 137"),
        ({"disttrain.test/exit-code": "1"}, "Error, exit code 1"),
    ],
    ids=["oomkilled", "exit-code-1"],
)
def test_a_failed_node_fails_the_task_with_the_reason(
    namespace, run_dag, jobs, capfd, deferrable, annotations, expected
):
    runtime = fail_fast_runtime(jobs, namespace)
    dag_id = unique_dag_id("tj_fail")
    name = f"tj-fail-{dag_id[-6:]}"
    source = train_dag(
        dag_id,
        job_name=name,
        runtime=runtime,
        runtime_kind="TrainingRuntime",
        image="busybox:1.36",
        num_nodes=2,
        annotations=annotations,  # reach the node pods through the provider's runtime patch
        log_replicas="all",
        deferrable=deferrable,
    )
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "failed"
    output = "".join(capfd.readouterr())
    assert "JobFailedError" in output
    assert f"TrainJob {namespace}/{name} failed" in output
    assert (
        f"Failed condition: FailedJobs: jobset failed due to one or more job failures (first failed job: {name}-node-0)"
        in output
    )
    assert f"node-0 ({name}-node-0-0-" in output
    assert f"): Failed - container node: {expected}" in output
    assert f"[{name}-node-0-1-" in output and "epoch 1 loss=0.5" in output  # every node's log, as asked


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "sync"])
def test_an_unschedulable_trainjob_times_out_with_the_scheduler_s_message_and_is_deleted(
    namespace, run_dag, trainjobs, capfd, deferrable
):
    """Its node Job counts as active while the pods are Pending: still not started, so startup_timeout applies."""
    dag_id = unique_dag_id("tj_nogpu")
    name = f"tj-nogpu-{dag_id[-6:]}"
    source = train_dag(
        dag_id,
        job_name=name,
        num_nodes=2,
        gpus_per_node=64,  # more than any node has (8), within the provider's bound
        deferrable=deferrable,
        wait_policy=WaitPolicy(startup_timeout=8),
    )
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "failed"
    output = "".join(capfd.readouterr())
    assert "JobTimeoutError" in output
    assert f"TrainJob {namespace}/{name} did not start within startup_timeout" in output
    assert NO_GPU_NODE.search(output), output[-4000:]
    assert "was deleted (cleanup_policy.on_timeout=True)" in output
    trainjobs.wait_for(lambda: trainjobs.get(namespace, name) is None, timeout=30, what="TrainJob deletion")


SUSPEND_RESUME_DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy
from airflow_provider_disttrain.operators.manage import ResumeTrainingJobOperator, SuspendTrainingJobOperator
from airflow_provider_disttrain.operators.train_job import TrainJobOperator
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor

@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    submit = TrainJobOperator(task_id="submit", job_name="{name}", runtime="torch-distributed", num_nodes=2,
                              annotations={{"disttrain.test/run-seconds": "6"}}, wait_for_completion=False)
    pause = SuspendTrainingJobOperator(task_id="pause", job_name="{name}", kind="TrainJob")
    go = ResumeTrainingJobOperator(task_id="go", job_name="{name}", kind="TrainJob")
    done = TrainingJobSensor(task_id="done", job_name="{name}", kind="TrainJob", poke_interval=1, timeout=120)
    submit >> pause >> go >> done

pipeline()
"""


def test_suspend_and_resume_a_trainjob_with_the_manage_operators(namespace, run_dag, trainjobs):
    dag_id = unique_dag_id("tj_suspend")
    name = f"tj-pause-{dag_id[-6:]}"
    result = run_dag(dag_id, SUSPEND_RESUME_DAG.format(dag_id=dag_id, name=name))

    assert result.state == "success", result.task_states
    paused = result.xcom("pause")
    assert paused["kind"] == "TrainJob"
    summary = result.xcom("done")
    assert summary["state"] == "succeeded"
    conditions = {c["type"]: c for c in summary["conditions"]}
    # Trainer saw the suspension and the resumption (Suspended flipped back to False).
    assert (conditions["Suspended"]["status"], conditions["Suspended"]["reason"]) == ("False", "Resumed")
    assert trainjobs.get(namespace, name)["spec"]["suspend"] is False


def waiter_saw_it_running(
    trainjobs: TrainJobs, requests: ProviderRequests, deferrable: bool, namespace: str, name: str
) -> None:
    """Until the task's wait has seen the TrainJob running: a suspended TrainJob's status forgets that it
    ran (its Jobs are suspended), so only a waiter that saw it running knows the startup limit is over."""
    trainjobs.wait_for(lambda: trainjobs.ready_nodes(namespace, name) > 0, 90, "the nodes to run")
    if deferrable:
        # The trigger (run in this process by dag.test) counts a job in the census as it judges a view
        # of it, in the same step that marks it seen running.
        trainjobs.wait_for(lambda: telemetry.census.totals()["running"] > 0, 60, "the trigger to see it running")
    else:
        # The operator polls with a GET: one dispatched after the job's status said running read it so.
        before = requests.totals()["get"]
        trainjobs.wait_for(lambda: requests.totals()["get"] > before, 60, "the waiter to read it running")


def suspend_while_running_then_resume(
    trainjobs: TrainJobs,
    requests: ProviderRequests,
    deferrable: bool,
    namespace: str,
    name: str,
    startup_timeout: float,
    errors: list,
) -> None:
    """A TrainJob suspended after it ran (a user, or a queue's preemption), resumed past the startup limit."""
    try:
        waiter_saw_it_running(trainjobs, requests, deferrable, namespace, name)
        trainjobs.patch(namespace, name, {"spec": {"suspend": True}})
        trainjobs.wait_for(lambda: trainjobs.conditions(namespace, name).get("Suspended") == "True", 60)
        # The first run was long only so that it outlasts the wait above on any machine; once resumed,
        # the nodes may end at once (a suspended TrainJob's pod template may change: Kueue does so).
        patches = trainjobs.get(namespace, name)["spec"]["runtimePatches"]
        for patch in patches:  # the provider's entry (Kueue adds its own while suspended)
            if patch.get("manager") == PATCH_MANAGER:
                for replicated in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
                    replicated["template"]["spec"]["template"]["metadata"]["annotations"][RUN_SECONDS] = "1"
        trainjobs.patch(namespace, name, {"spec": {"runtimePatches": patches}})
        # Suspended until past the startup deadline (counted from the job's creation): the time is the
        # behaviour under test here, and the wait checks its deadlines when they pass.
        created = trainjobs.get(namespace, name)["metadata"]["creationTimestamp"]
        deadline = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() + startup_timeout
        time.sleep(max(0.0, deadline + 4 - time.time()))
        trainjobs.patch(namespace, name, {"spec": {"suspend": False}})
    except Exception as error:  # reported by the test, not lost in the thread
        errors.append(error)
        # The task ends at once (the job was deleted) rather than wait for a first run of 300 s.
        with contextlib.suppress(Exception):  # (none to delete: the error above says why)
            trainjobs.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs", name)


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_trainjob_suspended_after_it_ran_outlives_the_startup_timeout(
    namespace, admin_api, run_dag, trainjobs, deferrable
):
    dag_id = unique_dag_id("tj_suspended")
    name = f"tj-susp-{secrets.token_hex(3)}"
    startup_timeout = 30  # room for a busy Trainer and JobSet to start the nodes before the deadline
    errors: list[Exception] = []
    with ProviderRequests(admin_api, namespace, "trainjobs", GROUP) as requests:
        helper = threading.Thread(
            target=suspend_while_running_then_resume,
            args=(trainjobs, requests, deferrable, namespace, name, startup_timeout, errors),
            daemon=True,
        )
        helper.start()
        source = train_dag(
            dag_id,
            job_name=name,
            num_nodes=2,
            annotations={RUN_SECONDS: "300"},  # suspended long before; 1 s once resumed (the helper)
            deferrable=deferrable,
            wait_policy=WaitPolicy(startup_timeout=startup_timeout),
        )
        result = run_dag(dag_id, source)
        helper.join(timeout=120)

    # An API error says which request and why (a webhook's refusal is a 403 too): its body names it.
    assert errors == [], [f"{error!r} {getattr(error, 'status', '')} {getattr(error, 'body', '')}" for error in errors]
    assert result.task_state("train") == "success"
    summary = result.xcom("train")
    conditions = {c["type"]: c["status"] for c in summary["conditions"]}
    assert conditions == {"Suspended": "False", "Complete": "True"}
    assert trainjobs.get(namespace, name)["metadata"]["uid"] == summary["uid"]


DYING_FIRST_TRY_DAG = '''
from datetime import timedelta

import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.parameters import CleanupPolicy, PodOptions, RunPolicy, WaitPolicy
from airflow_provider_disttrain.operators.train_job import TrainJobOperator
from airflow_provider_disttrain.parameters import WaitPolicy


class WorkerDiesAfterSubmitting(TrainJobOperator):
    """Try 1 submits its TrainJob, then its worker "dies" while waiting (the job keeps running)."""

    def build_job_manifest(self, context, default_namespace):
        self._try_number = context["ti"].try_number
        return super().build_job_manifest(context, default_namespace)

    def _wait(self, hook, ref, *arguments):
        if self._try_number == 1:
            raise RuntimeError("worker lost while waiting for " + ref.name)
        return super()._wait(hook, ref, *arguments)


@dag(dag_id="{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))
def pipeline():
    WorkerDiesAfterSubmitting(
        task_id="train",
        runtime="torch-distributed",
        num_nodes=2,
        annotations={{"disttrain.test/run-seconds": "15"}},
        wait_policy=WaitPolicy(poll_interval=1),
        retries=1,
        retry_delay=timedelta(seconds=0),
    )

pipeline()
'''


def test_a_retry_reattaches_to_the_trainjob_of_the_try_that_died(namespace, run_dag, trainjobs):
    dag_id = unique_dag_id("tj_reattach")
    result = run_dag(dag_id, DYING_FIRST_TRY_DAG.format(dag_id=dag_id))

    assert result.task_state("train") == "success"
    created = trainjobs.list(namespace)
    assert len(created) == 1, [job["metadata"]["name"] for job in created]
    assert created[0]["metadata"]["labels"]["disttrain.airflow.apache.org/try-number"] == "1"
    assert result.xcom("train")["uid"] == created[0]["metadata"]["uid"]
    assert result.xcom("train")["state"] == "succeeded"


def test_a_sync_task_that_times_out_deletes_its_trainjob(namespace, run_dag, trainjobs, capfd):
    dag_id = unique_dag_id("tj_timeout")
    name = f"tj-timeout-{dag_id[-6:]}"
    source = train_dag(
        dag_id,
        job_name=name,
        annotations={"disttrain.test/run-seconds": "600"},
        execution_timeout=timedelta(seconds=8),
    )
    result = run_dag(dag_id, source)

    assert result.task_state("train") == "failed"
    assert re.search(SYNC_TIMEOUT, "".join(capfd.readouterr()))
    trainjobs.wait_for(lambda: trainjobs.get(namespace, name) is None, timeout=30, what="TrainJob deletion")
    trainjobs.wait_for(lambda: not trainjobs.pods(namespace, name), timeout=60, what="pod garbage collection")


def test_killing_a_deferred_trainjob_task_deletes_its_trainjob(namespace, trainjobs):
    """What the triggerer calls when a user marks a deferred task failed (Airflow 3.3 ``on_kill``)."""
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.manifest.builder import set_identity
    from airflow_provider_disttrain.manifest.train_job import TrainJobParameters, build_train_job
    from airflow_provider_disttrain.triggers.training_job import TrainingJobTrigger

    hook = TrainingJobHook()  # kubernetes_default: the service account, in this test's namespace
    manifest = build_train_job(
        None, TrainJobParameters(runtime="torch-distributed", annotations={"disttrain.test/run-seconds": "600"})
    )
    job = hook.create_job("TrainJob", set_identity(manifest, "killed-tj", namespace, {}), namespace)
    trigger = TrainingJobTrigger(
        kind="TrainJob",
        name="killed-tj",
        namespace=namespace,
        uid=job["metadata"]["uid"],
        connection=hook.trigger_connection(),
    )

    asyncio.run(trigger.on_kill())

    trainjobs.wait_for(lambda: trainjobs.get(namespace, "killed-tj") is None, timeout=30, what="deletion")
