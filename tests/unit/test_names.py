"""One name per concept, read from the package's source (issue 27, item 4).

A reader who meets a name in one module must not find the same name meaning something else in another:
two functions of one name that return different things (the two ``owner_of`` there were), one field name
for two meanings (``leader_replica`` on the kind and on its builder), several names for one label's value.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
from pathlib import Path

import airflow_provider_disttrain
from airflow_provider_disttrain.job.kinds import JOB_KINDS, BuildDefaults
from airflow_provider_disttrain.ownership.identity import TaskInstanceKeys
from airflow_provider_disttrain.ownership.naming import TASK_INSTANCE_LABEL
from airflow_provider_disttrain.ownership.orphans import JobOwner
from airflow_provider_disttrain.ui.view import task_instance_of

PACKAGE = Path(airflow_provider_disttrain.__file__).parent

# Public functions still defined under one name in two modules, left for a later change (each pair is
# named in the follow-up); the list may only shrink.
KNOWN_TWINS = {"classify", "registry", "replica_counts"}


def public_functions() -> dict[str, list[str]]:
    where: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                where[node.name].append(str(path.relative_to(PACKAGE)))
    return where


def test_no_two_modules_define_a_public_function_of_the_same_name() -> None:
    twins = {name: paths for name, paths in public_functions().items() if len(paths) > 1}
    assert set(twins) <= KNOWN_TWINS, twins


def test_the_walk_finds_the_functions_it_is_meant_to() -> None:
    functions = public_functions()
    assert functions["describe_owner"] == ["ownership/identity.py"]
    assert functions["job_owner"] == ["ownership/orphans.py"]


def test_the_leader_replica_is_the_kinds_and_the_builder_only_says_whether_it_builds_it() -> None:
    assert "leader_replica" not in {field.name for field in dataclasses.fields(BuildDefaults)}
    for kind in JOB_KINDS.values():
        assert kind.built_leader in (None, kind.leader_replica)
    assert JOB_KINDS["MPIJob"].built_leader == JOB_KINDS["MPIJob"].leader_replica == "Launcher"
    assert JOB_KINDS["TFJob"].built_leader is None and JOB_KINDS["TFJob"].leader_replica == "Chief"


def test_the_task_instance_labels_value_has_one_name_everywhere() -> None:
    """``naming.TASK_INSTANCE_LABEL``'s value is a ``task_instance_key`` in naming, identity, orphans and the UI."""
    assert {"task_instance_key", "legacy_task_instance_key"} <= {f.name for f in dataclasses.fields(TaskInstanceKeys)}
    assert "task_instance_key" in {field.name for field in dataclasses.fields(JobOwner)}
    job = {"metadata": {"labels": {TASK_INSTANCE_LABEL: "abc"}}}
    assert task_instance_of(job)["task_instance_key"] == "abc"
