"""Turning what a DAG author passed as ``job_manifest`` (dict, YAML text, file path) into a dict."""

from __future__ import annotations

import json

import pytest
import yaml

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.manifest.loading import MANIFEST_EXTENSIONS, load_manifest


def test_none_means_no_manifest():
    assert load_manifest(None) is None


def test_a_dict_is_deep_copied(load_yaml):
    manifest = load_yaml("manifests/pytorchjob.yaml")

    loaded = load_manifest(manifest)

    assert loaded == manifest
    loaded["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] = "changed"
    assert manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"] == (
        "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"
    )


def test_yaml_text_as_airflow_renders_a_templated_file(fixture_file):
    text = fixture_file("manifests/mpijob.yaml").read_text()

    loaded = load_manifest(text)

    assert loaded == yaml.safe_load(text)
    assert loaded["kind"] == "MPIJob"
    assert loaded["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"] == ["mpirun"]


def test_yaml_text_with_a_leading_document_marker():
    assert load_manifest("---\napiVersion: kubeflow.org/v1\nkind: TFJob\n") == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
    }


def test_json_text_is_yaml_too():
    assert load_manifest('{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}') == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
    }


def test_two_documents_are_refused():
    text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\n---\napiVersion: v1\nkind: ConfigMap\n"

    with pytest.raises(InvalidJobSpecError, match="expected exactly one YAML document, found 2") as excinfo:
        load_manifest(text)
    assert excinfo.value.field == "job_manifest"


@pytest.mark.parametrize("text", ["", "   \n", "---\n", "# only a comment\n"])
def test_an_empty_document_is_refused(text):
    with pytest.raises(InvalidJobSpecError, match="found 0"):
        load_manifest(text)


@pytest.mark.parametrize(
    ("text", "type_name"), [("- Master\n- Worker\n", "list"), ("just a sentence", "str"), ("42", "int")]
)
def test_a_document_that_is_not_a_mapping_is_refused(text, type_name):
    with pytest.raises(InvalidJobSpecError, match=f"expected a mapping, got {type_name}") as excinfo:
        load_manifest(text)
    assert excinfo.value.field == "job_manifest"


def test_invalid_yaml_is_refused_naming_the_field():
    text = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nspec:\n  pytorchReplicaSpecs: {Master: [\n"

    with pytest.raises(InvalidJobSpecError, match=r"^job_manifest: not valid YAML") as excinfo:
        load_manifest(text)
    assert excinfo.value.field == "job_manifest"
    assert "at line 5, column 1" in str(excinfo.value)
    # Neither the message nor a chained parser error (whose text quotes the file) echoes the manifest.
    assert "pytorchReplicaSpecs" not in str(excinfo.value)
    assert excinfo.value.__cause__ is None and excinfo.value.__suppress_context__


def test_the_field_name_can_be_chosen():
    with pytest.raises(InvalidJobSpecError, match=r"^base_manifest: ") as excinfo:
        load_manifest("- a\n", field="base_manifest")
    assert excinfo.value.field == "base_manifest"


@pytest.mark.parametrize("value", [42, b"apiVersion: kubeflow.org/v1", ["kind: PyTorchJob"]])
def test_other_types_are_refused(value):
    with pytest.raises(
        InvalidJobSpecError, match=f"expected a dict, YAML text or a file path, got {type(value).__name__}"
    ):
        load_manifest(value)  # type: ignore[arg-type]


def test_a_yaml_file_on_disk_is_read(fixture_file, load_yaml):
    path = fixture_file("manifests/pytorchjob.yaml")

    assert load_manifest(str(path)) == load_yaml("manifests/pytorchjob.yaml")


def test_a_path_with_surrounding_whitespace_is_read(fixture_file):
    path = fixture_file("manifests/tfjob.yaml")
    assert load_manifest(f"  {path}\n")["kind"] == "TFJob"


@pytest.mark.parametrize("suffix", [".yml", ".json"])
def test_yml_and_json_files_on_disk_are_read(tmp_path, load_yaml, suffix):
    manifest = load_yaml("manifests/pytorchjob-elastic.yaml")
    path = tmp_path / f"job{suffix}"
    path.write_text(json.dumps(manifest) if suffix == ".json" else yaml.safe_dump(manifest))

    assert load_manifest(str(path)) == manifest


def test_a_missing_file_is_refused_naming_it(tmp_path):
    missing = tmp_path / "jobs" / "train.yaml"

    with pytest.raises(InvalidJobSpecError, match="does not exist") as excinfo:
        load_manifest(str(missing))
    assert excinfo.value.field == "job_manifest"
    assert str(missing) in str(excinfo.value)


def test_a_directory_named_like_a_manifest_is_not_a_file(tmp_path):
    directory = tmp_path / "looks-like.yaml"
    directory.mkdir()
    with pytest.raises(InvalidJobSpecError, match="does not exist"):
        load_manifest(str(directory))


def test_the_manifest_extensions_are_the_ones_airflow_renders():
    assert MANIFEST_EXTENSIONS == (".yaml", ".yml", ".json")


# -- hostile YAML ---------------------------------------------------------------------------------------------


def alias_bomb(levels: int) -> str:
    """A PyTorchJob whose annotations hold nested aliases: each level repeats the one before ten times."""
    lines = ["apiVersion: kubeflow.org/v1", "kind: PyTorchJob", "metadata:", "  name: bomb", "x:"]
    lines.append('  l0: &l0 ["' + "x" * 50 + '"]')
    for level in range(1, levels + 1):
        lines.append(f"  l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def test_a_manifest_whose_aliases_expand_past_the_bound_is_refused_before_it_is_built():
    text = alias_bomb(6)  # ~700 bytes of text, 50 MB once every alias is a copy
    assert len(text) < 1000

    with pytest.raises(InvalidJobSpecError, match="expands to more than 1572864 bytes through its YAML aliases"):
        load_manifest(text)


def test_a_recursive_alias_is_refused():
    with pytest.raises(InvalidJobSpecError, match="recursive"):
        load_manifest("metadata: &m {name: a, self: *m}\n")


def test_anchors_reused_a_few_times_are_fine():
    text = "container: &c {name: pytorch, image: t:1}\nspec: {a: *c, b: *c}\n"

    assert load_manifest(text) == {
        "container": {"name": "pytorch", "image": "t:1"},
        "spec": {"a": {"name": "pytorch", "image": "t:1"}, "b": {"name": "pytorch", "image": "t:1"}},
    }


def test_a_manifest_larger_than_etcd_takes_is_refused():
    with pytest.raises(InvalidJobSpecError, match="larger than 1572864 bytes"):
        load_manifest("a: " + "x" * 1_600_000 + "\n")
