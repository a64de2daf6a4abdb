"""Turning what a DAG author passed as ``job_manifest`` into a dict.

The operators render a ``.yaml``/``.yml``/``.json`` path as a Jinja template file before ``execute``
runs (``manifest_template``), so by then the value is usually YAML text; a path that still exists on
disk (the operator run outside a DAG run) is read here too.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from airflow_provider_disttrain.exceptions import InvalidJobSpecError

if TYPE_CHECKING:
    import jinja2

MANIFEST_EXTENSIONS = (".yaml", ".yml", ".json")


def is_manifest_path(source: object) -> bool:
    """A one-line string ending in a manifest suffix: a file name, not YAML text."""
    return isinstance(source, str) and source.strip().endswith(MANIFEST_EXTENSIONS) and "\n" not in source.strip()


def manifest_template(env: jinja2.Environment, path: str, field: str = "job_manifest") -> jinja2.Template:
    """The manifest file at ``path`` as a Jinja template of ``env``.

    A relative path is looked up by the environment's loader (the DAG folder and ``template_searchpath``);
    an absolute one is read directly, which Jinja's search-path loader cannot do.
    """
    import jinja2

    path = path.strip()
    if os.path.isabs(path):
        if not Path(path).is_file():
            raise InvalidJobSpecError(field, f"manifest file {path!r} does not exist")
        return env.from_string(Path(path).read_text())
    try:
        return env.get_template(path)
    except jinja2.TemplateNotFound as error:
        raise InvalidJobSpecError(
            field, f"manifest file {path!r} not found in the DAG folder or the DAG's template_searchpath"
        ) from error


def load_manifest(source: Mapping[str, Any] | str | None, field: str = "job_manifest") -> dict[str, Any] | None:
    if source is None:
        return None
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    if not isinstance(source, str):
        raise InvalidJobSpecError(field, f"expected a dict, YAML text or a file path, got {type(source).__name__}")
    text = source
    stripped = source.strip()
    if is_manifest_path(stripped):
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
