"""``TrainingJobHook`` against fakes of the Kubernetes client's ``CustomObjectsApi`` and ``CoreV1Api``.

The API classes are replaced by ``MagicMock(spec=...)`` (so a misspelt method or argument of the real
client fails here); the hook's own code, the connection handling of the cncf provider, tenacity's
retries and the model serialization of the real ``ApiClient`` all run.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any
from unittest.mock import MagicMock

import pytest
import tenacity
import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from airflow_provider_disttrain.exceptions import (
    ClusterAccessError,
    InvalidJobSpecError,
    JobAlreadyExistsError,
    TrainingJobError,
)
from airflow_provider_disttrain.failures.failure_class import diagnose
from airflow_provider_disttrain.hooks.api_errors import API_ATTEMPTS
from airflow_provider_disttrain.hooks.training_job import LOG_TAIL_LINES, TrainingJobHook
from airflow_provider_disttrain.job.kinds import JOB_NAME_LABEL, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL, get_job_kind
from airflow_provider_disttrain.job.outcome import JobRef
from airflow_provider_disttrain.kube.connection import ClusterConnection
from tests.unit.fakes import ManualClock, failed_status, make_job

MANIFEST = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "train-abc", "namespace": "ml"},
    "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}},
}


def api_error(status: int, reason: str = "", body: str = "") -> ApiException:
    error = ApiException(status=status, reason=reason)
    error.body = body
    return error


@pytest.fixture(autouse=True)
def no_retry_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep tenacity's retries (the attempts count) but drop its backoff, so the tests stay fast."""
    for attribute in vars(TrainingJobHook).values():
        retrying = getattr(attribute, "retry", None)
        if isinstance(retrying, tenacity.BaseRetrying):
            monkeypatch.setattr(retrying, "wait", tenacity.wait_none())


@pytest.fixture
def custom() -> MagicMock:
    return MagicMock(spec=client.CustomObjectsApi)


@pytest.fixture
def core() -> MagicMock:
    return MagicMock(spec=client.CoreV1Api)


@pytest.fixture
def hook(custom: MagicMock, core: MagicMock, monkeypatch: pytest.MonkeyPatch) -> TrainingJobHook:
    """A hook on the default connection whose API classes are the fakes; no kubeconfig is loaded."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    hook = TrainingJobHook(conn_id="kubernetes_default")
    # The cncf hook's cached properties, set before first use: the boundary to the cluster.
    hook.__dict__["custom_object_client"] = custom
    hook.__dict__["core_v1_client"] = core
    hook.__dict__["api_client"] = client.ApiClient()
    return hook


# -- create ---------------------------------------------------------------------------------------------


def test_create_sends_the_kinds_group_version_plural_and_namespace(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.create_namespaced_custom_object.return_value = {"metadata": {"name": "train-abc", "uid": "u1"}}

    created = hook.create_job("PyTorchJob", MANIFEST, "ml")

    assert created == {"metadata": {"name": "train-abc", "uid": "u1"}}
    custom.create_namespaced_custom_object.assert_called_once_with(
        group="kubeflow.org",
        version="v1",
        namespace="ml",
        plural="pytorchjobs",
        body=MANIFEST,
        dry_run=None,
        field_validation="Strict",
    )


def test_create_of_an_mpijob_uses_v2beta1(hook: TrainingJobHook, custom: MagicMock) -> None:
    hook.create_job("mpijob", {"metadata": {"name": "mpi"}}, "ml")

    kwargs = custom.create_namespaced_custom_object.call_args.kwargs
    assert (kwargs["group"], kwargs["version"], kwargs["plural"]) == ("kubeflow.org", "v2beta1", "mpijobs")


def test_dry_run_asks_the_api_server_for_dry_run_all(hook: TrainingJobHook, custom: MagicMock) -> None:
    hook.create_job("PyTorchJob", MANIFEST, "ml", dry_run=True)

    assert custom.create_namespaced_custom_object.call_args.kwargs["dry_run"] == "All"


def test_create_conflict_is_job_already_exists_and_not_retried(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.create_namespaced_custom_object.side_effect = api_error(409, "Conflict")

    with pytest.raises(JobAlreadyExistsError, match="PyTorchJob ml/train-abc already exists"):
        hook.create_job("PyTorchJob", MANIFEST, "ml")
    assert custom.create_namespaced_custom_object.call_count == 1


def test_create_forbidden_names_the_request_and_rbac(hook: TrainingJobHook, custom: MagicMock) -> None:
    message = (
        'pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:ml:af" cannot create resource '
        '"pytorchjobs" in API group "kubeflow.org" in the namespace "ml"'
    )
    body = json.dumps({"message": message})
    custom.create_namespaced_custom_object.side_effect = api_error(403, "Forbidden", body)

    with pytest.raises(ClusterAccessError) as raised:
        hook.create_job("PyTorchJob", MANIFEST, "ml")

    message = str(raised.value)
    assert "create PyTorchJob ml/train-abc" in message
    assert "403 Forbidden" in message
    assert "RBAC" in message
    assert "system:serviceaccount:ml:af" in message
    assert custom.create_namespaced_custom_object.call_count == 1


def test_create_unauthorized_is_a_cluster_access_error(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.create_namespaced_custom_object.side_effect = api_error(401, "Unauthorized")

    with pytest.raises(ClusterAccessError, match=r"create PyTorchJob ml/train-abc: .*401 Unauthorized"):
        hook.create_job("PyTorchJob", MANIFEST, "ml")


def test_create_retries_a_transient_503(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.create_namespaced_custom_object.side_effect = [api_error(503, "Service Unavailable"), {"ok": True}]

    assert hook.create_job("PyTorchJob", MANIFEST, "ml") == {"ok": True}
    assert custom.create_namespaced_custom_object.call_count == 2


def test_create_rejected_as_invalid_is_not_retried(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.create_namespaced_custom_object.side_effect = api_error(422, "Unprocessable Entity")

    with pytest.raises(ApiException) as raised:
        hook.create_job("PyTorchJob", MANIFEST, "ml")
    assert raised.value.status == 422
    assert custom.create_namespaced_custom_object.call_count == 1


# -- get ------------------------------------------------------------------------------------------------


def test_get_job_reads_the_named_object(hook: TrainingJobHook, custom: MagicMock) -> None:
    job = make_job(namespace="ml")
    custom.get_namespaced_custom_object.return_value = job

    assert hook.get_job("PyTorchJob", "train-abc", "ml") == job
    custom.get_namespaced_custom_object.assert_called_once_with(
        group="kubeflow.org", version="v1", namespace="ml", plural="pytorchjobs", name="train-abc"
    )


WEBHOOK_DENIAL = json.dumps(
    {
        "kind": "Status",
        "status": "Failure",
        "code": 403,
        "reason": "Forbidden",
        "message": 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied the request: '
        "spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1",
    }
)


def test_an_admission_webhooks_refusal_of_a_create_is_an_invalid_spec_not_rbac(
    hook: TrainingJobHook, custom: MagicMock
) -> None:
    custom.create_namespaced_custom_object.side_effect = api_error(403, "Forbidden", WEBHOOK_DENIAL)

    with pytest.raises(InvalidJobSpecError) as raised:
        hook.create_job("PyTorchJob", MANIFEST, "ml")

    assert raised.value.field == "spec.pytorchReplicaSpecs[Master].replicas"
    assert "must be 1" in raised.value.problem
    assert "RBAC" not in str(raised.value)


def test_an_admission_webhooks_refusal_of_a_patch_is_an_invalid_spec(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.patch_namespaced_custom_object.side_effect = api_error(403, "Forbidden", WEBHOOK_DENIAL)

    with pytest.raises(InvalidJobSpecError, match="patch PyTorchJob ml/train-abc"):
        hook.patch_job("PyTorchJob", "train-abc", "ml", {"spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 2}}}})


def test_a_403_of_a_quota_says_admission_not_rbac(hook: TrainingJobHook, custom: MagicMock) -> None:
    message = 'pytorchjobs.kubeflow.org "train-abc" is forbidden: exceeded quota: ml-quota, requested: count=1'
    custom.create_namespaced_custom_object.side_effect = api_error(403, "Forbidden", json.dumps({"message": message}))

    with pytest.raises(ClusterAccessError) as raised:
        hook.create_job("PyTorchJob", MANIFEST, "ml")

    assert "RBAC" not in str(raised.value)
    assert message in str(raised.value)


def test_get_job_not_found_is_none(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.get_namespaced_custom_object.side_effect = api_error(404, "Not Found")

    assert hook.get_job("PyTorchJob", "gone", "ml") is None
    assert custom.get_namespaced_custom_object.call_count == 1


def test_get_job_forbidden_is_a_cluster_access_error(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.get_namespaced_custom_object.side_effect = api_error(403, "Forbidden")

    with pytest.raises(ClusterAccessError, match="get PyTorchJob ml/train-abc: forbidden"):
        hook.get_job("PyTorchJob", "train-abc", "ml")


def test_get_job_retries_a_transient_503_then_succeeds(hook: TrainingJobHook, custom: MagicMock) -> None:
    job = make_job()
    custom.get_namespaced_custom_object.side_effect = [api_error(503), api_error(503), job]

    assert hook.get_job("PyTorchJob", "train-abc", "default") == job
    assert custom.get_namespaced_custom_object.call_count == 3


def test_get_job_retries_a_dropped_connection(hook: TrainingJobHook, custom: MagicMock) -> None:
    job = make_job()
    custom.get_namespaced_custom_object.side_effect = [urllib3.exceptions.ProtocolError("connection reset"), job]

    assert hook.get_job("PyTorchJob", "train-abc", "default") == job


def test_get_job_gives_up_after_the_attempts(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.get_namespaced_custom_object.side_effect = api_error(503, "Service Unavailable")

    with pytest.raises(ApiException):
        hook.get_job("PyTorchJob", "train-abc", "default")
    assert custom.get_namespaced_custom_object.call_count == API_ATTEMPTS


# -- find, patch, delete ----------------------------------------------------------------------------------


def test_find_jobs_selects_by_labels_and_sorts_oldest_first(hook: TrainingJobHook, custom: MagicMock) -> None:
    newer = make_job("b", created="2024-05-02T00:00:00Z")
    older = make_job("a", created="2024-05-01T00:00:00Z")
    custom.list_namespaced_custom_object.return_value = {"items": [newer, older]}

    found = hook.find_jobs("PyTorchJob", "ml", {"z.io/key": "2", "a.io/key": "1"})

    assert [job["metadata"]["name"] for job in found] == ["a", "b"]
    custom.list_namespaced_custom_object.assert_called_once_with(
        group="kubeflow.org",
        version="v1",
        namespace="ml",
        plural="pytorchjobs",
        label_selector="a.io/key=1,z.io/key=2",
    )


def test_find_jobs_with_no_match_is_empty(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.list_namespaced_custom_object.return_value = {"items": []}

    assert hook.find_jobs("PyTorchJob", "ml", {"a": "b"}) == []


def test_find_jobs_forbidden_names_the_listing(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.list_namespaced_custom_object.side_effect = api_error(403, "Forbidden")

    with pytest.raises(ClusterAccessError, match="list pytorchjobs in ml"):
        hook.find_jobs("PyTorchJob", "ml", {"a": "b"})


def test_patch_job_sends_the_merge_patch(hook: TrainingJobHook, custom: MagicMock) -> None:
    patch = {"spec": {"runPolicy": {"suspend": True}}}
    custom.patch_namespaced_custom_object.return_value = {"patched": True}

    assert hook.patch_job("PyTorchJob", "train-abc", "ml", patch) == {"patched": True}
    custom.patch_namespaced_custom_object.assert_called_once_with(
        group="kubeflow.org",
        version="v1",
        namespace="ml",
        plural="pytorchjobs",
        name="train-abc",
        body=patch,
        field_validation="Strict",
    )


# What the API server (v1.36) answered with fieldValidation=Strict, captured from the local cluster.
UNKNOWN_FIELD_ON_CREATE = json.dumps(
    {
        "kind": "Status",
        "status": "Failure",
        "message": 'PyTorchJob in version "v1" cannot be handled as a PyTorchJob: strict decoding error: '
        'unknown field "spec.runPolicy.cleanPodPolicyy"',
        "reason": "BadRequest",
        "code": 400,
    }
)
UNKNOWN_FIELD_ON_PATCH = json.dumps(
    {
        "kind": "Status",
        "status": "Failure",
        "message": ' "" is invalid: patch: Invalid value: "{\\"spec\\":{}}": strict decoding error: '
        'unknown field "spec.runPolicy.suspended"',
        "reason": "Invalid",
        "details": {"causes": [{"reason": "FieldValueInvalid", "message": "Invalid value", "field": "patch"}]},
        "code": 422,
    }
)


def test_create_of_a_misspelt_field_names_it_and_is_not_retried(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.create_namespaced_custom_object.side_effect = api_error(400, "Bad Request", UNKNOWN_FIELD_ON_CREATE)

    with pytest.raises(InvalidJobSpecError) as raised:
        hook.create_job("PyTorchJob", MANIFEST, "ml")

    assert raised.value.field == "spec.runPolicy.cleanPodPolicyy"
    assert "create PyTorchJob ml/train-abc" in raised.value.problem
    assert custom.create_namespaced_custom_object.call_count == 1


def test_patch_of_a_misspelt_field_names_it(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.patch_namespaced_custom_object.side_effect = api_error(422, "Unprocessable Entity", UNKNOWN_FIELD_ON_PATCH)

    with pytest.raises(InvalidJobSpecError) as raised:
        hook.patch_job("PyTorchJob", "train-abc", "ml", {"spec": {"runPolicy": {"suspended": True}}})

    assert raised.value.field == "spec.runPolicy.suspended"


def test_delete_with_uid_sends_a_precondition(hook: TrainingJobHook, custom: MagicMock) -> None:
    assert hook.delete_job("PyTorchJob", "train-abc", "ml", uid="uid-1") is True

    custom.delete_namespaced_custom_object.assert_called_once_with(
        group="kubeflow.org",
        version="v1",
        namespace="ml",
        plural="pytorchjobs",
        name="train-abc",
        body={"propagationPolicy": "Background", "preconditions": {"uid": "uid-1"}},
    )


def test_delete_without_uid_sends_no_precondition(hook: TrainingJobHook, custom: MagicMock) -> None:
    hook.delete_job("PyTorchJob", "train-abc", "ml")

    assert custom.delete_namespaced_custom_object.call_args.kwargs["body"] == {"propagationPolicy": "Background"}


@pytest.mark.parametrize("status", [404, 409], ids=["already-gone", "uid-precondition-failed"])
def test_delete_of_a_missing_or_replaced_job_is_false(hook: TrainingJobHook, custom: MagicMock, status: int) -> None:
    custom.delete_namespaced_custom_object.side_effect = api_error(status)

    assert hook.delete_job("PyTorchJob", "train-abc", "ml", uid="uid-1") is False


def test_delete_forbidden_is_a_cluster_access_error(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.delete_namespaced_custom_object.side_effect = api_error(403, "Forbidden")

    with pytest.raises(ClusterAccessError, match="delete PyTorchJob ml/train-abc"):
        hook.delete_job("PyTorchJob", "train-abc", "ml")


def test_delete_and_wait_deletes_then_reads_until_the_job_is_gone(
    hook: TrainingJobHook, custom: MagicMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(0.0)
    lingering = make_job(namespace="ml", uid="uid-1")  # finalizers still running
    custom.get_namespaced_custom_object.side_effect = [lingering, lingering, api_error(404)]

    assert hook.delete_and_wait("PyTorchJob", "train-abc", "ml", uid="uid-1", clock=clock) is True

    assert custom.delete_namespaced_custom_object.call_args.kwargs["body"]["preconditions"] == {"uid": "uid-1"}
    assert custom.get_namespaced_custom_object.call_count == 3
    assert clock.sleeps == [1.0, 1.0]


def test_delete_and_wait_is_done_when_a_new_job_took_the_name(
    hook: TrainingJobHook, custom: MagicMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    custom.get_namespaced_custom_object.return_value = make_job(namespace="ml", uid="uid-2")

    assert hook.delete_and_wait("PyTorchJob", "train-abc", "ml", uid="uid-1", clock=ManualClock(0.0)) is True
    assert custom.get_namespaced_custom_object.call_count == 1


def test_delete_and_wait_of_a_missing_job_is_false_without_waiting(hook: TrainingJobHook, custom: MagicMock) -> None:
    custom.delete_namespaced_custom_object.side_effect = api_error(404)

    assert hook.delete_and_wait("PyTorchJob", "train-abc", "ml") is False
    custom.get_namespaced_custom_object.assert_not_called()


def test_delete_and_wait_gives_up_after_its_timeout(
    hook: TrainingJobHook, custom: MagicMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    custom.get_namespaced_custom_object.return_value = make_job(namespace="ml")

    with pytest.raises(TrainingJobError, match=r"^PyTorchJob ml/train-abc still exists 3s after its deletion"):
        hook.delete_and_wait("PyTorchJob", "train-abc", "ml", timeout=3, clock=ManualClock(0.0))


# -- pods, logs, events -------------------------------------------------------------------------------------


def v1_pod(name: str, replica: str, index: int, *, terminated: client.V1ContainerStateTerminated | None = None) -> Any:
    state = (
        client.V1ContainerState(terminated=terminated)
        if terminated
        else client.V1ContainerState(running=client.V1ContainerStateRunning())
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={JOB_NAME_LABEL: "train-abc", REPLICA_TYPE_LABEL: replica, REPLICA_INDEX_LABEL: str(index)},
        ),
        spec=client.V1PodSpec(containers=[client.V1Container(name="pytorch", image="trainer:1")]),
        status=client.V1PodStatus(
            phase="Failed" if terminated else "Running",
            container_statuses=[
                client.V1ContainerStatus(
                    name="pytorch",
                    image="trainer:1",
                    image_id="",
                    ready=terminated is None,
                    restart_count=0,
                    state=state,
                )
            ],
        ),
    )


def v1_event(involved: str | None, reason: str, message: str, minute: int) -> Any:
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=f"{involved}.{minute}"),
        involved_object=client.V1ObjectReference(name=involved, kind="Pod"),
        reason=reason,
        message=message,
        type="Warning",
        last_timestamp=datetime(2024, 5, 1, 10, minute, tzinfo=timezone.utc),
    )


def test_list_job_pods_selects_by_job_name_label_and_returns_api_dicts(hook: TrainingJobHook, core: MagicMock) -> None:
    core.list_namespaced_pod.return_value = client.V1PodList(items=[v1_pod("train-abc-master-0", "master", 0)])

    pods = hook.list_job_pods("train-abc", "ml", kind="PyTorchJob")

    core.list_namespaced_pod.assert_called_once_with("ml", label_selector=f"{JOB_NAME_LABEL}=train-abc")
    assert pods[0]["metadata"]["name"] == "train-abc-master-0"
    # The API server's JSON field names, as the pure modules expect.
    assert pods[0]["status"]["containerStatuses"][0]["restartCount"] == 0


def test_read_pod_log_passes_container_and_tail(hook: TrainingJobHook, core: MagicMock) -> None:
    # The raw response is read and decoded: some client versions turn text/plain into str(bytes).
    core.read_namespaced_pod_log.return_value = MagicMock(data="line 1\nline 2 ✓\n".encode())

    assert hook.read_pod_log("pod-a", "ml", "pytorch", tail_lines=5) == "line 1\nline 2 ✓\n"
    core.read_namespaced_pod_log.assert_called_once_with(
        "pod-a",
        "ml",
        container="pytorch",
        tail_lines=5,
        limit_bytes=1_000_000,
        previous=False,
        timestamps=False,
        _preload_content=False,
    )


def test_read_pod_log_since_a_time_sends_the_apis_since_time(hook: TrainingJobHook, core: MagicMock) -> None:
    """``read_namespaced_pod_log`` has no since_time: the hook makes the same GET through ``call_api``."""
    api_client = client.ApiClient()  # the real client, with its transport replaced
    api_client.call_api = MagicMock(return_value=MagicMock(data=b"2026-01-01T00:00:02.000000000Z epoch 2\n"))
    core.api_client = api_client

    text = hook.read_pod_log(
        "pod-a", "ml", "pytorch", timestamps=True, since_time="2026-01-01T00:00:02Z", limit_bytes=4096
    )

    assert text == "2026-01-01T00:00:02.000000000Z epoch 2\n"
    core.read_namespaced_pod_log.assert_not_called()
    (path, method), kwargs = api_client.call_api.call_args
    assert (path, method) == ("/api/v1/namespaces/{namespace}/pods/{name}/log", "GET")
    assert kwargs["path_params"] == {"namespace": "ml", "name": "pod-a"}
    assert kwargs["query_params"] == [
        ("container", "pytorch"),
        ("limitBytes", 4096),
        ("previous", False),
        ("timestamps", True),
        ("sinceTime", "2026-01-01T00:00:02Z"),
    ]
    # The Accept header the generated read_namespaced_pod_log sends (the API server refuses text/plain alone).
    core.read_namespaced_pod_log.side_effect = lambda *a, **k: client.CoreV1Api(api_client).read_namespaced_pod_log(
        *a, **k
    )
    hook.read_pod_log("pod-a", "ml", "pytorch")
    assert api_client.call_api.call_args.args[4] == kwargs["header_params"] == {"Accept": "application/json"}
    assert kwargs["auth_settings"] == ["BearerToken"]
    assert kwargs["_preload_content"] is False


@pytest.mark.parametrize("status", [400, 404], ids=["container-not-started", "pod-gone"])
def test_read_pod_log_of_a_missing_log_is_empty(hook: TrainingJobHook, core: MagicMock, status: int) -> None:
    core.read_namespaced_pod_log.side_effect = api_error(status)

    assert hook.read_pod_log("pod-a", "ml") == ""


def serve_events(core: MagicMock, events: list[Any]) -> None:
    """``list_namespaced_event`` answering as the API server does: only events matching the field selector."""

    def list_events(namespace: str, *, field_selector: str) -> Any:
        wanted = dict(term.split("=", 1) for term in field_selector.split(","))
        fields = {"type": lambda e: e.type, "involvedObject.name": lambda e: e.involved_object.name}
        return client.CoreV1EventList(
            items=[e for e in events if all(fields[key](e) == value for key, value in wanted.items())]
        )

    core.list_namespaced_event.side_effect = list_events


def test_list_warning_events_asks_for_each_named_object_and_returns_them_oldest_first(
    hook: TrainingJobHook, core: MagicMock
) -> None:
    serve_events(
        core,
        [
            v1_event("train-abc-worker-0", "BackOff", "Back-off restarting failed container", 5),
            v1_event("someone-elses-pod", "FailedMount", "not ours", 1),
            v1_event("train-abc", "FailedCreatePod", "quota exceeded", 2),
        ],
    )

    events = hook.list_warning_events("ml", {"train-abc", "train-abc-worker-0"})

    # The server filters: one request per object, never the whole namespace's Warning events.
    assert sorted(call.kwargs["field_selector"] for call in core.list_namespaced_event.call_args_list) == [
        "type=Warning,involvedObject.name=train-abc",
        "type=Warning,involvedObject.name=train-abc-worker-0",
    ]
    assert {call.args for call in core.list_namespaced_event.call_args_list} == {("ml",)}
    assert [event["reason"] for event in events] == ["FailedCreatePod", "BackOff"]
    assert events[0]["involvedObject"]["name"] == "train-abc"


# -- connection ---------------------------------------------------------------------------------------------


def connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, Any]) -> None:
    """A real ``kubernetes`` connection, defined the way a deployment would: an environment variable."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kubernetes", "extra": extra}))


KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {"name": "c", "cluster": {"server": "https://10.0.0.1:6443"}},
        {"name": "prod", "cluster": {"server": "https://10.9.9.9:6443"}},
    ],
    "users": [{"name": "u", "user": {"token": "t0ken-abcdef"}}, {"name": "admin", "user": {"token": "ADMIN-secret"}}],
    "contexts": [
        {"name": "ctx", "context": {"cluster": "c", "user": "u"}},
        {"name": "prod-admin", "context": {"cluster": "prod", "user": "admin"}},
    ],
    "current-context": "ctx",
}
# What travels for context ``ctx``: that context, its cluster and its user, nothing of ``prod-admin``.
CTX_ONLY = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443"}}],
    "users": [{"name": "u", "user": {"token": "t0ken-abcdef"}}],
    "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    "current-context": "ctx",
}


@pytest.fixture
def kubeconfig_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    return str(path)


def test_default_namespace_comes_from_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    connection(monkeypatch, "k8s_ns", {"namespace": "ml", "in_cluster": True})

    assert TrainingJobHook(conn_id="k8s_ns").default_namespace() == "ml"
    assert TrainingJobHook(conn_id="kubernetes_default").default_namespace() == "default"


def test_a_kubeconfig_file_travels_cut_to_the_tasks_context(
    monkeypatch: pytest.MonkeyPatch, kubeconfig_file: str
) -> None:
    connection(monkeypatch, "k8s_file", {"kube_config_path": kubeconfig_file, "namespace": "ml"})

    shipped = TrainingJobHook(conn_id="k8s_file", cluster_context="ctx").trigger_connection()

    # The triggerer must not look for the file: the path is dropped, the other extras travel.
    assert shipped == ClusterConnection("k8s_file", "ctx", kubeconfig=CTX_ONLY, extras={"namespace": "ml"})
    assert "ADMIN-secret" not in json.dumps(shipped.to_dict())  # another context's credentials stay home


def test_the_travelling_kubeconfig_is_the_one_of_the_connections_own_context(
    monkeypatch: pytest.MonkeyPatch, kubeconfig_file: str
) -> None:
    extra = {"kube_config_path": kubeconfig_file, "cluster_context": "prod-admin"}
    connection(monkeypatch, "k8s_prod", extra)

    shipped = TrainingJobHook(conn_id="k8s_prod").trigger_connection()

    assert shipped.cluster_context == "prod-admin"
    assert shipped.kubeconfig is not None
    assert [user["name"] for user in shipped.kubeconfig["users"]] == ["admin"]
    assert shipped.kubeconfig["current-context"] == "prod-admin"


def test_a_context_the_file_lacks_is_named_without_echoing_the_file(
    monkeypatch: pytest.MonkeyPatch, kubeconfig_file: str
) -> None:
    connection(monkeypatch, "k8s_file", {"kube_config_path": kubeconfig_file})

    with pytest.raises(TrainingJobError, match="'nope'") as refused:
        TrainingJobHook(conn_id="k8s_file", cluster_context="nope").trigger_connection()

    assert kubeconfig_file in str(refused.value)
    assert "t0ken" not in str(refused.value)


def test_legacy_prefixed_kubeconfig_extras_stay_home(monkeypatch: pytest.MonkeyPatch, kubeconfig_file: str) -> None:
    # Connections made before Airflow 2.3 name their extras extra__kubernetes__<field>; the cncf hooks
    # read both forms, so a path left in either form would clash with the shipped kubeconfig.
    connection(
        monkeypatch,
        "k8s_legacy",
        {"extra__kubernetes__kube_config_path": kubeconfig_file, "extra__kubernetes__namespace": "ml"},
    )

    shipped = TrainingJobHook(conn_id="k8s_legacy").trigger_connection()

    assert shipped.kubeconfig == CTX_ONLY
    assert shipped.extras == {"extra__kubernetes__namespace": "ml"}


def test_an_operator_config_file_travels(monkeypatch: pytest.MonkeyPatch, kubeconfig_file: str) -> None:
    shipped = TrainingJobHook(conn_id="kubernetes_default", config_file=kubeconfig_file).trigger_connection()

    assert shipped == ClusterConnection("kubernetes_default", "ctx", kubeconfig=CTX_ONLY, extras={})


@pytest.mark.parametrize(
    "extra",
    [{"in_cluster": True, "namespace": "ml"}, {"kube_config": json.dumps(KUBECONFIG)}, {}],
    ids=["in-cluster", "kubeconfig-in-the-connection", "nothing-named"],
)
def test_a_connection_without_a_file_travels_as_its_id_alone(
    monkeypatch: pytest.MonkeyPatch, kubeconfig_file: str, extra: dict[str, Any]
) -> None:
    """The triggerer reads the connection itself; the worker's own $KUBECONFIG never travels by accident."""
    monkeypatch.setenv("KUBECONFIG", kubeconfig_file)
    connection(monkeypatch, "k8s", extra)

    assert TrainingJobHook(conn_id="k8s").trigger_connection() == ClusterConnection("k8s")


def test_the_connection_value_is_stored_as_json_and_read_back() -> None:
    shipped = ClusterConnection("k8s", "ctx", kubeconfig=CTX_ONLY, extras={"namespace": "ml"})

    stored = json.loads(json.dumps(shipped.to_dict()))

    assert ClusterConnection.from_dict(stored) == shipped
    assert ClusterConnection.from_dict(stored).identity == shipped.identity
    assert ClusterConnection("k8s", "other").identity != shipped.identity
    with pytest.raises(ValueError, match="config_dict"):
        ClusterConnection.from_dict({**stored, "config_dict": {}})


# -- collect_evidence, judged by failure_class.diagnose ----------------------------------------------------------


def explained(hook: TrainingJobHook, ref: JobRef, headline: str, job: Any, *, logger: Any = None) -> str:
    """The explanation of a failed wait: the hook reads the evidence, ``failure_class.diagnose`` judges it."""
    evidence = hook.collect_evidence(ref, logger=logger)
    return diagnose(get_job_kind(ref.kind), ref.title, "failed", headline, job, evidence)[0]


def test_explain_outcome_reports_the_failing_replica_its_log_and_events(hook: TrainingJobHook, core: MagicMock) -> None:
    oom = client.V1ContainerStateTerminated(exit_code=137, reason="OOMKilled")
    core.list_namespaced_pod.return_value = client.V1PodList(
        items=[v1_pod("train-abc-worker-0", "worker", 0), v1_pod("train-abc-master-0", "master", 0, terminated=oom)]
    )
    core.read_namespaced_pod_log.return_value = MagicMock(data=b"epoch 1\nallocating 80GiB\n")
    serve_events(core, [v1_event("train-abc-master-0", "BackOff", "Back-off restarting failed container", 3)])
    job = make_job(namespace="ml", status=failed_status())

    message = explained(hook, JobRef("PyTorchJob", "train-abc", "ml"), "PyTorchJob ml/train-abc failed", job)

    lines = message.splitlines()
    assert lines[0] == "PyTorchJob ml/train-abc failed"
    assert "Failed condition: BackoffLimitExceeded" in message
    assert "master-0 (train-abc-master-0): Failed - container pytorch: OOMKilled, exit code 137" in message
    assert "worker-0 (train-abc-worker-0): Running" in message
    assert "Last log lines of train-abc-master-0:" in message
    assert "  | allocating 80GiB" in lines
    assert "train-abc-master-0: BackOff: Back-off restarting failed container" in message
    # Only the failing container's log is read, and only its tail.
    core.read_namespaced_pod_log.assert_called_once_with(
        "train-abc-master-0",
        "ml",
        container="pytorch",
        tail_lines=LOG_TAIL_LINES,
        limit_bytes=1_000_000,
        previous=False,
        timestamps=False,
        _preload_content=False,
    )


def test_explain_outcome_reads_the_previous_log_of_a_container_restarted_after_failing(
    hook: TrainingJobHook, core: MagicMock
) -> None:
    restarted = v1_pod("train-abc-master-0", "master", 0)
    status = restarted.status.container_statuses[0]
    status.restart_count = 1
    status.last_state = client.V1ContainerState(
        terminated=client.V1ContainerStateTerminated(exit_code=1, reason="Error")
    )
    core.list_namespaced_pod.return_value = client.V1PodList(items=[restarted])
    logs = {True: b"Traceback\nValueError: bad shard\n", False: b"starting again\n"}
    core.read_namespaced_pod_log.side_effect = lambda *args, previous=False, **kwargs: MagicMock(data=logs[previous])
    serve_events(core, [])

    message = explained(hook, JobRef("PyTorchJob", "train-abc", "ml"), "failed", make_job(namespace="ml"))

    assert "  | ValueError: bad shard" in message.splitlines()
    assert "starting again" not in message
    assert core.read_namespaced_pod_log.call_args.kwargs["previous"] is True


def test_explain_outcome_keeps_the_headline_when_diagnostics_fail(hook: TrainingJobHook, core: MagicMock) -> None:
    core.list_namespaced_pod.side_effect = api_error(500, "Internal Server Error")
    job = make_job(namespace="ml", status=failed_status(reason="OOM", message="replica master-0 was OOMKilled"))
    logger = MagicMock()

    message = explained(hook, JobRef("PyTorchJob", "train-abc", "ml"), "it failed", job, logger=logger)

    assert message == "it failed\nFailed condition: OOM: replica master-0 was OOMKilled"
    assert logger.warning.call_args.args[:2] == ("Could not collect diagnostics for %s: %r", "PyTorchJob ml/train-abc")
