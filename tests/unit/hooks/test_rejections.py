"""The API server's refusals (bodies as the v1.36 API server sends them) become errors naming the field."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from airflow_provider_disttrain.hooks.rejections import field_error


def refusal(status: int, body: object) -> ApiException:
    error = ApiException(status=status, reason="refused")
    error.body = body if isinstance(body, str) else json.dumps(body)
    return error


def strict(message: str) -> dict:
    return {"kind": "Status", "status": "Failure", "message": message, "reason": "BadRequest", "code": 400}


def test_an_unknown_field_is_named():
    error = field_error(
        refusal(400, strict('cannot be handled as a PyTorchJob: strict decoding error: unknown field "spec.foo"')),
        "create PyTorchJob ml/x",
    )

    assert error is not None
    assert error.field == "spec.foo"
    assert error.problem == (
        "the API server does not know the field spec.foo (misspelt, or at the wrong level?) and refused to "
        "create PyTorchJob ml/x"
    )


def test_several_unknown_fields_are_all_listed_and_the_first_is_the_field():
    message = (
        'strict decoding error: unknown field "spec.runPolicy.backofLimit", unknown field '
        '"spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].imagePullPolcy"'
    )

    error = field_error(refusal(400, strict(message)), "create PyTorchJob ml/x")

    assert error is not None
    assert error.field == "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].imagePullPolcy"
    assert "spec.runPolicy.backofLimit" in error.problem


def test_a_schema_violation_names_the_first_real_cause():
    body = {
        "kind": "Status",
        "message": 'PyTorchJob.kubeflow.org "x" is invalid: [...]',
        "reason": "Invalid",
        "details": {
            "causes": [
                {"reason": "FieldValueInvalid", "message": "some rules were not checked", "field": "<nil>"},
                {
                    "reason": "FieldValueTypeInvalid",
                    "message": 'Invalid value: "string": spec.runPolicy.backoffLimit in body must be of type integer',
                    "field": "spec.runPolicy.backoffLimit",
                },
            ]
        },
        "code": 422,
    }

    error = field_error(refusal(422, body), "create PyTorchJob ml/x")

    assert error is not None
    assert error.field == "spec.runPolicy.backoffLimit"
    assert "must be of type integer" in error.problem


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (409, strict('unknown field "spec.foo"')),  # a conflict is not a refusal of a field
        (500, strict('unknown field "spec.foo"')),
        (400, strict("the server rejected our request for an unknown reason")),
        (400, "not json"),
        (422, {"message": "invalid", "details": {"causes": [{"field": "<nil>", "message": "x"}]}}),
        (400, None),
    ],
)
def test_other_errors_are_left_alone(status, body):
    error = refusal(status, body) if body is not None else ApiException(status=status)
    assert field_error(error, "create PyTorchJob ml/x") is None


def test_errors_without_a_status_are_left_alone():
    assert field_error(ConnectionError("refused"), "create PyTorchJob ml/x") is None


def test_a_type_error_from_an_admission_webhook_names_the_field():
    # Kueue's mutating webhook decodes the job before the API server's schema check runs (v0.17 body).
    message = (
        'admission webhook "mpytorchjob.kb.io" denied the request: json: cannot unmarshal string into Go struct '
        "field RunPolicy.spec.runPolicy.backoffLimit of type int32"
    )
    body = {"kind": "Status", "status": "Failure", "message": message, "reason": "BadRequest", "code": 400}

    error = field_error(refusal(400, body), "create PyTorchJob ml/x")

    assert error is not None
    assert error.field == "spec.runPolicy.backoffLimit"
    assert error.problem.startswith("must be of type int32, not string; an admission webhook refused to create")


# -- admission webhooks (controller-runtime validators refuse with 403) ----------------------------------------

TRAINER_REASON = (
    'spec.runtimeRef: Invalid value: {"name":"torch-distributed-with-initializers","apiGroup":'
    '"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}: must have volumeMount with name - initializer '
    "in container dataset-initializer of the dataset-initializer job"
)


def denied(webhook: str, reason: str) -> dict:
    """The Status the API server sends for a webhook's ``allowed: false`` with code 403 (controller-runtime's)."""
    message = f'admission webhook "{webhook}" denied the request: {reason}'
    return {"kind": "Status", "status": "Failure", "message": message, "reason": "Forbidden", "code": 403}


@pytest.mark.parametrize(
    ("webhook", "reason", "field"),
    [
        (
            "validator.pytorchjob.training-operator.kubeflow.org",
            "spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode",
            "spec.elasticPolicy.nProcPerNode",
        ),
        (
            "validator.pytorchjob.training-operator.kubeflow.org",
            "[spec.pytorchReplicaSpecs[Master].replicas: Forbidden: must be 1, "
            "spec.pytorchReplicaSpecs[Worker]: Required value: must be configured if elastic policy is used]",
            "spec.pytorchReplicaSpecs[Master].replicas",
        ),
        ("validator.trainjob.trainer.kubeflow.org", TRAINER_REASON, "spec.runtimeRef"),
        ("policy.example.com", "images from docker.io are not allowed", "spec"),
    ],
    ids=["training-operator", "aggregated", "trainer", "no-field"],
)
def test_an_admission_webhooks_403_is_an_invalid_spec_with_its_whole_reason(webhook, reason, field):
    error = field_error(refusal(403, denied(webhook, reason)), "create PyTorchJob ml/x")

    assert error is not None
    assert error.field == field
    assert error.problem == f"the admission webhook {webhook} refused to create PyTorchJob ml/x: {reason}"


def test_a_long_webhook_reason_is_kept_whole():
    reasons = [
        f"spec.pytorchReplicaSpecs[Worker].template.spec.containers[{i}].image: Required value" for i in range(6)
    ]
    reason = "[" + ", ".join(reasons) + "]"
    assert len(reason) > 300

    error = field_error(refusal(403, denied("validator.pytorchjob.training-operator.kubeflow.org", reason)), "patch x")

    assert error is not None
    assert error.problem.endswith(reason)
    assert error.field == "spec.pytorchReplicaSpecs[Worker].template.spec.containers[0].image"


def test_an_rbac_403_is_no_invalid_spec():
    message = (
        'pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:ml:af" cannot create resource '
        '"pytorchjobs" in API group "kubeflow.org" in the namespace "ml"'
    )
    body = {"kind": "Status", "status": "Failure", "message": message, "reason": "Forbidden", "code": 403}

    assert field_error(refusal(403, body), "create PyTorchJob ml/x") is None
