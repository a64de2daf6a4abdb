"""A job Kueue can never admit, through the wait: ``check_job``, the sync operator, the LocalQueue check
before submitting, the sensor and the retry policy. Kueue's objects are the ones captured from the real
Kueue v0.19.2 (``tests/fixtures/workloads``), re-labelled for the fake's job."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import structlog
from kubernetes.client.exceptions import ApiException

from airflow_provider_disttrain.exceptions import JobFailedError, JobInadmissibleError
from airflow_provider_disttrain.failures.retry_policy import decide
from airflow_provider_disttrain.job import outcome as outcomes
from airflow_provider_disttrain.job.outcome import JobRef, check_job
from airflow_provider_disttrain.kueue.admission import never_admitted
from airflow_provider_disttrain.kueue.hold import JOB_UID_LABEL, QUEUE_NAME_LABEL
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator
from airflow_provider_disttrain.parameters import CleanupPolicy, WaitPolicy
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from tests.unit.fakes import START, FakeTrainingJobHook, condition, make_context, make_job, running_status, with_hook
from tests.unit.kueue.test_admission import V017, V019, load

HELD = {"conditions": [condition("Created", START), condition("Suspended", START, "PyTorchJobSuspended")]}
REF = JobRef("PyTorchJob", "train-abc", "default", "uid-1")


def workload_for(job: dict[str, Any], situation: str, version: str = V019) -> dict[str, Any]:
    """The captured Workload of ``situation``, as if Kueue had made it for ``job``."""
    workload = copy.deepcopy(load(version, situation))
    workload["metadata"]["namespace"] = job["metadata"]["namespace"]
    workload["metadata"]["labels"][JOB_UID_LABEL] = job["metadata"]["uid"]
    return workload


def kueue_makes_the_workload(hook: FakeTrainingJobHook, situation: str, version: str = V019) -> None:
    """As Kueue does, once the job exists: its Workload, as Kueue left one in ``situation``."""

    def make(_: int) -> None:
        if hook.jobs and not hook.workloads:
            hook.workloads.append(workload_for(hook.only_job(), situation, version))

    hook.on_get = make


def held_job(queue: str = "user-queue") -> dict[str, Any]:
    return make_job(status=HELD, labels={QUEUE_NAME_LABEL: queue}, created=START)


def forbidden() -> ApiException:
    return ApiException(status=403, reason="Forbidden")


def not_found(name: str | None) -> ApiException:
    error = ApiException(status=404, reason="Not Found")
    error.body = json.dumps({"kind": "Status", "code": 404, "details": {"name": name} if name else {}})
    return error


# -- check_job ------------------------------------------------------------------------------------------------


def test_kueues_final_word_ends_the_wait_for_a_first_admission() -> None:
    job = held_job()
    verdict = never_admitted(workload_for(job, "exceeds-max-quota"))

    outcome = check_job(REF, job, now=0.0, queue_deadline=10_000.0, never_admitted=verdict)

    assert outcome is not None and outcome["status"] == outcomes.INADMISSIBLE
    assert outcome["message"].startswith("PyTorchJob default/train-abc was not admitted: Kueue can never admit it")
    assert "ExceedsMaxQuota" in outcome["message"] and "> maximum capacity (1)" in outcome["message"]


def test_a_word_that_is_not_final_waits_and_a_job_that_ran_is_not_judged_here() -> None:
    job = held_job()
    assert never_admitted(workload_for(job, "waiting-for-quota")) is None
    verdict = never_admitted(workload_for(job, "local-queue-missing"))
    assert check_job(REF, job, now=0.0, never_admitted=verdict, has_run=True) is None  # re-admission: waited for
    assert check_job(REF, make_job(status=running_status()), now=0.0, never_admitted=verdict) is None


# -- the sync operator ------------------------------------------------------------------------------------------


def operator(hook: FakeTrainingJobHook, **kwargs: Any) -> Any:
    arguments: dict[str, Any] = {
        "task_id": "train",
        "image": "trainer:1",
        "job_name": "train-abc",
        "local_queue": "user-queue",
        "wait_policy": WaitPolicy(poll_interval=1, queue_timeout=3600),
        **kwargs,
    }
    return with_hook(TrainingJobOperator(**arguments), hook)


@pytest.mark.parametrize(
    ("situation", "reason"),
    [
        ("exceeds-max-quota", "ExceedsMaxQuota"),
        ("no-matching-flavor", "NoMatchingFlavor"),
        ("cluster-queue-stopped", "Suspended"),
    ],
)
def test_the_sync_wait_fails_at_once_in_kueues_words_and_deletes_the_job(situation: str, reason: str) -> None:
    hook = FakeTrainingJobHook(progression=[HELD])
    kueue_makes_the_workload(hook, situation)
    task = operator(hook, cleanup_policy=CleanupPolicy(on_timeout=False))  # deleted whatever the policy

    with pytest.raises(JobInadmissibleError) as raised:
        task.execute(make_context())

    message = str(raised.value)
    assert f"Kueue can never admit it ({reason}: " in message
    assert "was deleted: Kueue can never admit it as its queues stand." in message
    assert hook.job("train-abc") is None
    assert sum(task.clock.sleeps) < 5  # not the queue_timeout's hour
    assert isinstance(raised.value, JobFailedError)


def test_the_v017_words_for_a_quota_it_can_never_give_are_waited_out_until_queue_timeout() -> None:
    # Kueue v0.17 (or v0.19 without UnadmittedWorkloadsObservability) says "Pending": not final.
    hook = FakeTrainingJobHook(progression=[HELD])
    kueue_makes_the_workload(hook, "exceeds-max-quota", V017)
    task = operator(hook, wait_policy=WaitPolicy(poll_interval=1, queue_timeout=30))

    with pytest.raises(Exception, match="was not admitted by Kueue within queue_timeout"):
        task.execute(make_context())


# -- the LocalQueue, before submitting ----------------------------------------------------------------------


def test_a_local_queue_that_does_not_exist_is_refused_before_anything_is_created() -> None:
    hook = FakeTrainingJobHook()
    hook.kueue_queues[("localqueues", "default", "user-queue")] = None

    with pytest.raises(JobInadmissibleError) as raised:
        operator(hook).execute(make_context())

    assert str(raised.value) == (
        "PyTorchJob default/train-abc was not submitted: Kueue could never admit it "
        "(LocalQueue user-queue doesn't exist in namespace default)"
    )
    assert hook.called("create_job") == [] and hook.called("find_jobs") == []
    assert [args for args, _ in hook.called("get_kueue_queue")] == [("LocalQueue", "user-queue", "default")]


@pytest.mark.parametrize("version", [V017, V019])
def test_a_stopped_cluster_queue_is_refused_before_anything_is_created(version: str) -> None:
    hook = FakeTrainingJobHook()
    local_queue = load(version, "localqueue-of-stopped-clusterqueue")
    cluster_queue = load(version, "clusterqueue-stopped")
    local_queue["spec"]["clusterQueue"] = cluster_queue["metadata"]["name"]
    hook.kueue_queues[("localqueues", "default", "user-queue")] = local_queue
    hook.kueue_queues[("clusterqueues", None, cluster_queue["metadata"]["name"])] = cluster_queue

    with pytest.raises(JobInadmissibleError, match=r"is stopped \(spec.stopPolicy Hold\)"):
        operator(hook).execute(make_context())

    assert hook.called("create_job") == []


def test_without_the_cluster_queue_permission_the_local_queues_own_word_judges() -> None:
    hook = FakeTrainingJobHook()
    hook.kueue_queues[("localqueues", "default", "user-queue")] = load(V019, "localqueue-of-stopped-clusterqueue")
    hook.kueue_queues[
        ("clusterqueues", None, load(V019, "localqueue-of-stopped-clusterqueue")["spec"]["clusterQueue"])
    ] = forbidden()

    with pytest.raises(JobInadmissibleError, match=r"LocalQueue user-queue is inactive \(ClusterQueueIsInactive\)"):
        operator(hook).execute(make_context())


@pytest.mark.parametrize("error", [forbidden(), not_found(None)], ids=["forbidden", "no-kueue-crd"])
def test_a_local_queue_that_cannot_be_read_is_said_once_and_the_job_goes_on(error: ApiException) -> None:
    from tests.unit.fakes import succeeded_status

    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    hook.kueue_queues[("localqueues", "default", "user-queue")] = error

    with structlog.testing.capture_logs() as logs:
        result = operator(hook).execute(make_context())

    assert result["state"] == "succeeded"
    said = [entry["event"] for entry in logs if "was not checked before submitting" in str(entry["event"])]
    assert len(said) == 1 and "localqueues.kueue.x-k8s.io" in said[0]
    assert len(hook.called("create_job")) == 1


def test_a_job_without_a_queue_reads_no_queue() -> None:
    from tests.unit.fakes import succeeded_status

    hook = FakeTrainingJobHook(progression=[succeeded_status()])
    operator(hook, local_queue=None).execute(make_context())
    assert hook.called("get_kueue_queue") == []


# -- the sensor, the retry policy ------------------------------------------------------------------------------


def test_the_sensor_fails_at_once_and_leaves_the_job_to_its_owner() -> None:
    hook = FakeTrainingJobHook()
    job = hook.add_job(held_job())
    hook.workloads.append(workload_for(job, "local-queue-missing"))
    sensor = with_hook(TrainingJobSensor(task_id="wait", job_name="train-abc"), hook)

    with pytest.raises(JobInadmissibleError, match=r"Misconfigured: .*LocalQueue does-not-exist doesn't exist"):
        sensor.poke(make_context())

    assert hook.job("train-abc") is not None and hook.called("delete_job") == []


def test_the_retry_policy_does_not_retry_what_kueue_can_never_admit() -> None:
    verdict = decide(JobInadmissibleError("Kueue can never admit it"))
    assert verdict.action == "fail" and "never admit" in str(verdict.reason)


def test_the_captured_fixtures_are_kueues_own() -> None:
    # capture.py writes the Kueue version it ran against: the fixtures read here are not hand-written.
    for version in (V017, V019):
        for name in ("exceeds-max-quota", "local-queue-missing", "cluster-queue-stopped", "clusterqueue-stopped"):
            path = Path(__file__).parents[2] / "fixtures" / "workloads" / version / f"{name}.yaml"
            assert path.read_text().startswith(f"# Captured from Kueue {version} on the local cluster"), path


# -- the hook's read of a queue ---------------------------------------------------------------------------


class _Queues:
    """The kubernetes client's CustomObjectsApi, answering each get with ``answer``."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.calls = answer, []

    def _get(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    get_namespaced_custom_object = get_cluster_custom_object = _get


@pytest.mark.parametrize(
    ("answer", "expected"),
    [({"kind": "LocalQueue"}, {"kind": "LocalQueue"}), (not_found("user-queue"), None)],
    ids=["found", "missing"],
)
def test_the_hook_reads_a_queue_and_a_404_naming_it_is_none(answer: Any, expected: Any) -> None:
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.kueue.admission import CLUSTER_QUEUE, LOCAL_QUEUE

    hook = TrainingJobHook()
    hook.__dict__["_custom"] = queues = _Queues(answer)
    assert hook.get_kueue_queue(LOCAL_QUEUE, "user-queue", "ml") == expected
    assert queues.calls[-1] == {
        "group": "kueue.x-k8s.io",
        "version": "v1beta2",
        "namespace": "ml",
        "plural": "localqueues",
        "name": "user-queue",
    }
    queues.answer = answer if expected is not None else not_found("cluster-queue")
    assert hook.get_kueue_queue(CLUSTER_QUEUE, "cluster-queue") == expected
    assert "namespace" not in queues.calls[-1] and queues.calls[-1]["plural"] == "clusterqueues"


@pytest.mark.parametrize("error", [not_found(None), forbidden()], ids=["no-kueue-crd", "forbidden"])
def test_the_hook_raises_what_is_not_a_missing_queue(error: ApiException) -> None:
    from airflow_provider_disttrain.hooks.training_job import TrainingJobHook
    from airflow_provider_disttrain.kueue.admission import LOCAL_QUEUE

    hook = TrainingJobHook()
    hook.__dict__["_custom"] = _Queues(error)
    with pytest.raises(ApiException):
        hook.get_kueue_queue(LOCAL_QUEUE, "user-queue", "ml")
