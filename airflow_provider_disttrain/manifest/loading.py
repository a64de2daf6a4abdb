"""Turning what a DAG author passed as ``job_manifest`` into a dict.

Airflow renders a ``.yaml``/``.yml``/``.json`` path through ``template_ext`` before ``execute`` runs,
so by then the value is usually YAML text; a path that still exists on disk (an absolute path used
outside a DAG run) is read here too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_disttrain.exceptions import InvalidJobSpecError

MANIFEST_EXTENSIONS = (".yaml", ".yml", ".json")


def load_manifest(source: Mapping[str, Any] | str | None, field: str = "job_manifest") -> dict[str, Any] | None:
    if source is None:
        return None
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    if not isinstance(source, str):
        raise InvalidJobSpecError(field, f"expected a dict, YAML text or a file path, got {type(source).__name__}")
    text = source
    stripped = source.strip()
    if stripped.endswith(MANIFEST_EXTENSIONS) and "\n" not in stripped:
        path = Path(stripped)
        if not path.is_file():
            raise InvalidJobSpecError(field, f"manifest file {stripped!r} does not exist")
        text = path.read_text()
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as err:
        raise InvalidJobSpecError(field, f"not valid YAML: {err}") from err
    if len(documents) != 1:
        raise InvalidJobSpecError(field, f"expected exactly one YAML document, found {len(documents)}")
    if not isinstance(documents[0], dict):
        raise InvalidJobSpecError(field, f"expected a mapping, got {type(documents[0]).__name__}")
    return documents[0]
