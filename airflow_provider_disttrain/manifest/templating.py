"""What rendering a ``job_manifest`` template may change: values, not the pod's privileges.

A manifest written as YAML with Jinja in it (inline, or a file the operator renders) takes values
from ``params`` and ``dag_run.conf``, which whoever triggers the DAG sets. A value rendered into YAML
text becomes YAML: ``image: {{ params.image }}`` with an image of ``"x\\n  securityContext: {privileged:
true}"`` adds a field the DAG's author never wrote. Escaping cannot be done for the author (Jinja does
not know where in the YAML a value lands), and comparing with the unrendered text cannot either (a
template is seldom valid YAML before it is rendered).

So the rule is: a field that widens what the pod may do on its node (the fields the Pod Security
``baseline`` profile restricts: privileged containers, host namespaces, host paths and ports, added
capabilities, unconfined profiles) may be in the rendered job only if the template writes its key
literally, outside any ``{{ }}``/``{% %}``. The author can still template its value
(``privileged: {{ params.debug }}``); a parameter cannot bring the key. Jinja's own lexer tells the
literal text from the template code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.manifest.loading import parse_yaml

if TYPE_CHECKING:
    import jinja2


def _unconfined(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == "Unconfined"


# Key -> whether its value widens the pod's privileges (a harmless value, e.g. ``privileged: false`` or
# ``capabilities: {drop: [ALL]}``, is allowed wherever it comes from).
SECURITY_FIELDS: dict[str, Callable[[Any], bool]] = {
    "privileged": bool,
    "allowPrivilegeEscalation": bool,
    "hostNetwork": bool,
    "hostPID": bool,
    "hostIPC": bool,
    "hostPath": bool,
    "hostPort": bool,
    "capabilities": lambda value: isinstance(value, Mapping) and bool(value.get("add")),
    "procMount": lambda value: value not in (None, "Default"),
    "seccompProfile": _unconfined,
    "appArmorProfile": _unconfined,
}


def _widening_fields(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """``(path, key)`` of each security field of ``value`` whose value widens the pod's privileges."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            item_path = f"{path}.{key}" if path else str(key)
            if key in SECURITY_FIELDS and SECURITY_FIELDS[key](item):
                yield item_path, str(key)
            yield from _widening_fields(item, item_path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _widening_fields(item, f"{path}[{index}]")


def has_jinja(text: str, env: jinja2.Environment) -> bool:
    return any(token_type != "data" for _, token_type, _ in env.lex(text))


def literal_text(template_source: str, env: jinja2.Environment) -> str:
    """What of ``template_source`` is written out, not computed: the lexer's ``data`` tokens."""
    return "".join(value for _, token_type, value in env.lex(template_source) if token_type == "data")


def refuse_rendered_privileges(template_source: str, rendered: Mapping[str, Any], env: jinja2.Environment) -> None:
    """Raise ``InvalidJobSpecError`` naming the first privilege-widening field of ``rendered`` whose key
    the template does not write literally (it came from a rendered value)."""
    literal = literal_text(template_source, env)
    for path, key in _widening_fields(rendered, ""):
        if not re.search(rf"(?<![\w-])[\"']?{re.escape(key)}[\"']?\s*:", literal):
            raise InvalidJobSpecError(
                path,
                f"{key} is set only by what the template rendered (a params or dag_run.conf value became YAML); "
                "a field that widens the pod's privileges must be written in the manifest itself (its value "
                "may be templated), or pass the manifest as a dict",
            )


def check_rendered_manifest(template_source: str, rendered: Any, env: jinja2.Environment) -> Any:
    """``rendered`` (what ``template_source`` rendered to), once ``refuse_rendered_privileges`` passed for
    each of its YAML documents. Text that does not parse is left for ``load_manifest`` to report."""
    if not isinstance(rendered, str) or not has_jinja(template_source, env):
        return rendered
    try:
        documents = parse_yaml(rendered)
    except InvalidJobSpecError:
        return rendered
    for document in documents:
        if isinstance(document, Mapping):
            refuse_rendered_privileges(template_source, document, env)
    return rendered
