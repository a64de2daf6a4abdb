"""The API server's refusal of a job (or a patch), turned into an error that names the field.

Jobs are created and patched with ``fieldValidation=Strict``: by default the API server drops a field
its schema does not know (a misspelt ``runPolicy.cleanPodPolicyy``) with no more than a warning
header, and the job runs without what the user wrote. Strict makes it refuse instead, as a 400
("strict decoding error: unknown field ...") on create or a 422 on patch; schema violations
(a type, a pattern) come as a 422 whose ``details.causes`` name the field. Pure: parses the body.
"""

from __future__ import annotations

import json
import re
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.hooks.api_errors import api_status

_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')
_REFUSAL_STATUSES = (400, 422)


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
    if api_status(error) not in _REFUSAL_STATUSES:
        return None
    body = _status_body(error)
    message = str(body.get("message") or "")
    if unknown := _UNKNOWN_FIELD.findall(message):
        fields = ", ".join(sorted(unknown))
        return InvalidJobSpecError(
            sorted(unknown)[0],
            f"the API server does not know the field{'s' if len(unknown) > 1 else ''} {fields} (misspelt, or at "
            f"the wrong level?) and refused to {what}",
        )
    causes = (body.get("details") or {}).get("causes") or []
    for cause in causes:
        field = cause.get("field") if isinstance(cause, dict) else None
        if field and field != "<nil>":
            return InvalidJobSpecError(field, f"the API server refused to {what}: {cause.get('message') or message}")
    return None
