"""The API server's refusal of a job (or a patch), turned into an error that names the field.

Jobs are created and patched with ``fieldValidation=Strict``: by default the API server drops a field
its schema does not know (a misspelt ``runPolicy.cleanPodPolicyy``) with no more than a warning
header, and the job runs without what the user wrote. Strict makes it refuse instead, as a 400
("strict decoding error: unknown field ...") on create or a 422 on patch; schema violations
(a type, a pattern) come as a 422 whose ``details.causes`` name the field. On a cluster with Kueue,
its mutating webhook decodes every training job before the API server's schema check, so a type error
comes first as a 400 from the webhook carrying Go's ``encoding/json`` message (``cannot unmarshal
string into Go struct field RunPolicy.spec.runPolicy.backoffLimit of type int32``), whose path after
the struct's name is the field.

Admission webhooks built on controller-runtime (Trainer's and the training-operator's validators)
refuse with HTTP 403 - the status an RBAC denial has too - and the message ``admission webhook "<name>"
denied the request: <field>: <reason>`` (several as ``[<field>: <reason>, ...]``). That is an invalid
spec, reported with the webhook's whole reason and the first field it names. Pure: parses the body.
"""

from __future__ import annotations

import json
import re
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.hooks.api_errors import api_status

_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')
# encoding/json's UnmarshalTypeError: "... into Go struct field <Struct>.<json path> of type <type>".
_WEBHOOK_TYPE_ERROR = re.compile(r"cannot unmarshal (\S+) into Go struct field [^.\s]+\.(\S+) of type (\S+)")
_REFUSAL_STATUSES = (400, 422)
_WEBHOOK_DENIAL = re.compile(r'admission webhook "([^"]+)" denied the request: (.*)', re.DOTALL)
# A field path as apimachinery's field.Path prints it: spec.pytorchReplicaSpecs[Master].replicas, containers[0].
_FIELD_PATH = re.compile(r"\[?((?:metadata|spec)(?:\.[\w-]+|\[[^\]\s]*\])*): ")


def _status_body(error: BaseException) -> dict[str, Any]:
    try:
        body = json.loads(getattr(error, "body", None) or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def field_error(error: BaseException, what: str) -> InvalidJobSpecError | None:
    """``InvalidJobSpecError`` naming the field the API server refused in ``error``; None for other errors.

    ``what`` says which request was refused (``create PyTorchJob ml/train``).
    """
    status = api_status(error)
    if status is None:
        return None
    body = _status_body(error)
    message = str(body.get("message") or "")
    if status in _REFUSAL_STATUSES and (refused := _schema_refusal(body, message, what)):
        return refused
    if denial := _WEBHOOK_DENIAL.search(message):
        return _webhook_refusal(denial.group(1), denial.group(2).strip(), what)
    return None


def _webhook_refusal(webhook: str, reason: str, what: str) -> InvalidJobSpecError:
    """The webhook's whole reason (never cut), under the first field it names."""
    field = match.group(1) if (match := _FIELD_PATH.match(reason)) else "spec"
    return InvalidJobSpecError(field, f"the admission webhook {webhook} refused to {what}: {reason}")


def _schema_refusal(body: dict[str, Any], message: str, what: str) -> InvalidJobSpecError | None:
    """A 400/422: an unknown field (Strict), a type Kueue's webhook could not decode, a schema violation."""
    if unknown := _UNKNOWN_FIELD.findall(message):
        fields = ", ".join(sorted(unknown))
        return InvalidJobSpecError(
            sorted(unknown)[0],
            f"the API server does not know the field{'s' if len(unknown) > 1 else ''} {fields} (misspelt, or at "
            f"the wrong level?) and refused to {what}",
        )
    if type_error := _WEBHOOK_TYPE_ERROR.search(message):
        given, field, expected = type_error.groups()
        return InvalidJobSpecError(
            field, f"must be of type {expected}, not {given}; an admission webhook refused to {what}: {message}"
        )
    causes = (body.get("details") or {}).get("causes") or []
    for cause in causes:
        field = cause.get("field") if isinstance(cause, dict) else None
        if field and field != "<nil>":
            return InvalidJobSpecError(field, f"the API server refused to {what}: {cause.get('message') or message}")
    return None
