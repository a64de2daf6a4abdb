"""Turning what a DAG author passed as ``job_manifest`` into a dict.

The operators render a ``.yaml``/``.yml``/``.json`` path (itself rendered first: ``{{ params.manifest }}``)
as a Jinja template file before ``execute`` runs (``manifest_template``), so by then the value is usually
YAML text; a path that still exists on disk (the operator run outside a DAG run) is read here too.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from airflow_provider_disttrain.exceptions import InvalidJobSpecError

if TYPE_CHECKING:
    import jinja2

MANIFEST_EXTENSIONS = (".yaml", ".yml", ".json")
# etcd refuses a request over 1.5 MiB; no job manifest comes near it. Bounds the text and what its
# aliases expand to (each alias is a copy once the manifest is sent as JSON: a few hundred bytes of
# nested aliases become tens of MiB).
MAX_MANIFEST_BYTES = 1_572_864


def is_manifest_path(source: object) -> bool:
    """A one-line string ending in a manifest suffix: a file name, not YAML text."""
    return isinstance(source, str) and source.strip().endswith(MANIFEST_EXTENSIONS) and "\n" not in source.strip()


def manifest_template(env: jinja2.Environment, path: str, field: str = "job_manifest") -> tuple[jinja2.Template, str]:
    """The manifest file at ``path`` as a Jinja template of ``env``, and its text.

    A relative path is looked up by the environment's loader (the DAG folder and ``template_searchpath``);
    an absolute one is read directly, which Jinja's search-path loader cannot do.
    """
    import jinja2

    path = path.strip()
    _refuse_templated_path(path, field)
    roots = template_search_roots(env.loader)
    if os.path.isabs(path):
        if not Path(path).is_file():
            raise InvalidJobSpecError(field, f"manifest file {path!r} does not exist")
        _refuse_outside(path, roots, field)
        text = Path(path).read_text()
        return env.from_string(text), text
    try:
        template = env.get_template(path)
    except jinja2.TemplateNotFound as error:
        raise InvalidJobSpecError(
            field, f"manifest file {path!r} not found in the DAG folder or the DAG's template_searchpath"
        ) from error
    if template.filename:  # a symlink in the DAG folder may point anywhere
        _refuse_outside(template.filename, roots, field)
    assert env.loader is not None  # get_template found the file through it
    # The text as the loader read it (the template keeps only its compiled code), for what rendering changed.
    return template, env.loader.get_source(env, path)[0]


def _refuse_templated_path(path: str, field: str) -> None:
    """The path is rendered once, before the file is read: Jinja left in it came from a rendered value."""
    if "{{" in path or "{%" in path:
        raise InvalidJobSpecError(field, f"the manifest file name {path!r} still contains Jinja once rendered")


def template_search_roots(loader: Any) -> list[Path]:
    """The folders a DAG's templates come from: its Jinja loader's (Airflow's: the DAG folder and
    ``template_searchpath``); ``operator.get_template_env().loader`` for an operator."""
    import jinja2

    if isinstance(loader, jinja2.FileSystemLoader):
        return [Path(root).resolve() for root in loader.searchpath]
    if isinstance(loader, jinja2.ChoiceLoader):
        return [root for inner in loader.loaders for root in template_search_roots(inner)]
    return []


def _refuse_outside(path: str | os.PathLike[str], roots: Sequence[Path], field: str) -> None:
    resolved = Path(path).resolve()
    if not any(resolved.is_relative_to(root) for root in roots):
        raise InvalidJobSpecError(
            field,
            f"manifest file {str(path)!r} is outside the DAG folder and the DAG's template_searchpath "
            f"({', '.join(str(root) for root in roots) or 'none known'}); put it there",
        )


def load_manifest(
    source: Mapping[str, Any] | str | None, field: str = "job_manifest", *, search_roots: Sequence[Path] | None = None
) -> dict[str, Any] | None:
    """``job_manifest`` as a dict: a mapping, YAML/JSON text, or the path of a file inside ``search_roots``
    (a value rendered into a path at run time; None: any path, for callers outside a DAG)."""
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
        if search_roots is not None:
            _refuse_outside(path, search_roots, field)
        text = path.read_text()
    documents = [doc for doc in parse_yaml(text, field) if doc is not None]
    if len(documents) != 1:
        raise InvalidJobSpecError(field, f"expected exactly one YAML document, found {len(documents)}")
    if not isinstance(documents[0], dict):
        raise InvalidJobSpecError(field, f"expected a mapping, got {type(documents[0]).__name__}")
    return documents[0]


def parse_yaml(text: str, field: str = "job_manifest") -> list[Any]:
    """The YAML documents of ``text``, refusing one whose aliases expand past ``MAX_MANIFEST_BYTES``.

    PyYAML's composer shares an aliased node instead of copying it, so the expanded size is counted on
    the node graph (each distinct node once, memoised) before anything is constructed. Errors name the
    line and column, never the text: a manifest may hold secrets.
    """
    if len(text.encode()) > MAX_MANIFEST_BYTES:
        raise InvalidJobSpecError(field, f"is larger than {MAX_MANIFEST_BYTES} bytes, more than etcd accepts")
    loader = yaml.SafeLoader(text)
    documents = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None and _expanded_size(node, {}, set(), field) > MAX_MANIFEST_BYTES:
                raise InvalidJobSpecError(
                    field,
                    f"expands to more than {MAX_MANIFEST_BYTES} bytes through its YAML aliases (*name); write "
                    "the repeated parts out",
                )
            documents.append(loader.construct_document(node) if node is not None else None)
    except yaml.YAMLError as error:
        raise InvalidJobSpecError(field, f"not valid YAML: {_where(error)}") from None
    finally:
        loader.dispose()
    return documents


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int], field: str) -> int:
    """Bytes the node takes once every alias in it is a copy (scalars by their length)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise InvalidJobSpecError(field, "a YAML alias refers to a node that contains it (a recursive structure)")
    open_nodes.add(key)
    if isinstance(node, yaml.ScalarNode):
        size = len(node.value) + 1
    elif isinstance(node, yaml.SequenceNode):
        size = 1 + sum(_expanded_size(item, sizes, open_nodes, field) for item in node.value)
    else:
        size = 1 + sum(
            _expanded_size(k, sizes, open_nodes, field) + _expanded_size(v, sizes, open_nodes, field)
            for k, v in node.value
        )
    open_nodes.discard(key)
    sizes[key] = size
    return size


def _where(error: yaml.YAMLError) -> str:
    """The parser's complaint and position, without the snippet of the text PyYAML appends."""
    problem = getattr(error, "problem", None) or type(error).__name__
    mark = getattr(error, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(problem)
