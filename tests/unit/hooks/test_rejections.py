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
