"""Only ``job_manifest`` may name a template file; every other templated field is a plain template.

Rendered by Airflow's own templating (``render_template_fields`` with the DAG's Jinja environment,
whose loader searches the DAG folder and ``template_searchpath``), and by the DAG processor's
``resolve_template_files``, the two places Airflow turns a field ending in a ``template_ext`` suffix
into a file's content.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
import pytest
import yaml
from airflow.sdk import DAG

from airflow_provider_disttrain.exceptions import InvalidJobSpecError
from airflow_provider_disttrain.operators.training_job import TrainingJobOperator

MANIFEST = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: nightly-{{ ds_nodash }}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: trainer:1
"""
CONTEXT = {"ds": "2024-05-01", "ds_nodash": "20240501"}


@pytest.fixture
def dag_folder(tmp_path: Path) -> Path:
    """A DAG folder holding files whose names a DAG author might well pass as arguments."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "model.yaml").write_text("layers: 48\n")
    (tmp_path / "kubeconfig.yaml").write_text(
        "apiVersion: v1\nkind: Config\nusers: [{name: u, user: {token: s3cret}}]\n"
    )
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / "job.yaml").write_text(MANIFEST)
    return tmp_path


def task(dag_folder: Path, **kwargs: Any) -> TrainingJobOperator:
    with DAG(
        "templates", schedule=None, start_date=pendulum.datetime(2024, 1, 1), template_searchpath=[str(dag_folder)]
    ):
        return TrainingJobOperator(task_id="train", **kwargs)


def rendered(operator: TrainingJobOperator, **params: Any) -> TrainingJobOperator:
    operator.render_template_fields({**CONTEXT, "params": params})  # type: ignore[arg-type]
    return operator


def test_args_naming_a_yaml_file_stay_the_path_the_author_wrote(dag_folder: Path) -> None:
    operator = rendered(task(dag_folder, image="t:1", args=["--config", "configs/model.yaml", "--out", "out.json"]))

    assert operator.args == ["--config", "configs/model.yaml", "--out", "out.json"]


def test_args_naming_a_file_that_is_not_there_are_no_template_error(dag_folder: Path) -> None:
    operator = rendered(task(dag_folder, image="t:1", args=["--config", "/etc/train/{{ ds }}.yaml"]))

    assert operator.args == ["--config", "/etc/train/2024-05-01.yaml"]


def test_config_file_stays_a_path_and_its_content_never_reaches_the_rendered_fields(dag_folder: Path) -> None:
    operator = rendered(task(dag_folder, image="t:1", config_file="kubeconfig.yaml"))

    assert operator.config_file == "kubeconfig.yaml"


def test_a_dict_manifest_holding_a_file_name_is_rendered_as_data(dag_folder: Path) -> None:
    manifest = {
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "template": {
                        "spec": {
                            "volumes": [
                                {
                                    "name": "cfg",
                                    "configMap": {"name": "c", "items": [{"key": "train.json", "path": "train.json"}]},
                                }
                            ]
                        }
                    }
                }
            }
        }
    }
    operator = rendered(task(dag_folder, image="t:1", job_manifest=manifest))

    volume = operator.job_manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][0]
    assert volume["configMap"]["items"] == [{"key": "train.json", "path": "train.json"}]


def test_a_manifest_path_relative_to_the_dag_folder_is_a_rendered_template(dag_folder: Path) -> None:
    operator = rendered(task(dag_folder, job_manifest="manifests/job.yaml"))

    assert yaml.safe_load(operator.job_manifest)["metadata"]["name"] == "nightly-20240501"


def test_an_absolute_manifest_path_is_a_rendered_template_too(dag_folder: Path) -> None:
    operator = rendered(task(dag_folder, job_manifest=str(dag_folder / "manifests" / "job.yaml")))

    assert yaml.safe_load(operator.job_manifest)["metadata"]["name"] == "nightly-20240501"


def test_a_manifest_file_outside_the_dag_folder_and_search_path_is_refused_unread(
    dag_folder: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "job.yml"
    elsewhere.write_text("apiVersion: v1\nkind: Secret\ndata: {token: c2VjcmV0LXZhbHVl}\n")
    (dag_folder / "linked.yaml").symlink_to(elsewhere)

    for path in (str(elsewhere), "linked.yaml"):
        with pytest.raises(InvalidJobSpecError, match="outside the DAG folder") as raised:
            rendered(task(dag_folder, job_manifest=path))
        assert raised.value.field == "job_manifest"
        assert "c2VjcmV0" not in str(raised.value)


def test_a_templated_manifest_path_is_rendered_then_read_as_a_template(dag_folder: Path) -> None:
    (dag_folder / "manifests" / "20240501.yaml").write_text(MANIFEST.replace("nightly-", "dated-"))

    by_date = rendered(task(dag_folder, job_manifest="manifests/{{ ds_nodash }}.yaml"))
    by_param = rendered(task(dag_folder, job_manifest="{{ params.manifest }}"), manifest="manifests/job.yaml")

    assert yaml.safe_load(by_date.job_manifest)["metadata"]["name"] == "dated-20240501"
    assert yaml.safe_load(by_param.job_manifest)["metadata"]["name"] == "nightly-20240501"


def test_a_rendered_path_is_still_bounded_to_the_dag_folder(dag_folder: Path) -> None:
    with pytest.raises(InvalidJobSpecError, match="not found in the DAG folder") as raised:
        rendered(task(dag_folder, job_manifest="{{ params.manifest }}"), manifest="../../etc/job.yaml")

    assert raised.value.field == "job_manifest"


INLINE = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
spec:
  pytorchReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
            - name: pytorch
              image: {{ params.image }}
"""
INJECTED_PRIVILEGED = "trainer:1\n              securityContext: {privileged: true}"
INJECTED_HOST_PATH = "trainer:1\n          volumes: [{name: host, hostPath: {path: /}}]"


@pytest.mark.parametrize(
    ("image", "field"),
    [
        (INJECTED_PRIVILEGED, "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].securityContext.privileged"),
        (INJECTED_HOST_PATH, "spec.pytorchReplicaSpecs.Worker.template.spec.volumes[0].hostPath"),
        (
            "trainer:1\n      template: {spec: {hostNetwork: true}}",
            "spec.pytorchReplicaSpecs.Worker.template.spec.hostNetwork",
        ),
    ],
    ids=["privileged", "hostPath", "hostNetwork"],
)
def test_a_param_rendered_into_yaml_cannot_add_privileges(dag_folder: Path, image: str, field: str) -> None:
    (dag_folder / "manifests" / "param.yaml").write_text(INLINE)

    for manifest in (INLINE, "manifests/param.yaml"):
        with pytest.raises(InvalidJobSpecError, match="set only by what the template rendered") as raised:
            rendered(task(dag_folder, job_manifest=manifest), image=image)
        assert raised.value.field == field


def test_a_security_field_the_template_writes_may_take_a_rendered_value(dag_folder: Path) -> None:
    manifest = INLINE + "              securityContext:\n                privileged: {{ params.privileged }}\n"

    operator = rendered(task(dag_folder, job_manifest=manifest), image="trainer:1", privileged="true")
    harmless = rendered(
        task(dag_folder, job_manifest=INLINE), image="t:1\n              securityContext: {privileged: false}"
    )

    container = yaml.safe_load(operator.job_manifest)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert container["containers"][0]["securityContext"] == {"privileged": True}
    assert "privileged: false" in harmless.job_manifest


@pytest.mark.parametrize("path", ["manifests/missing.yaml", "/nonexistent/job.json"])
def test_a_manifest_file_that_is_not_there_names_job_manifest(dag_folder: Path, path: str) -> None:
    with pytest.raises(InvalidJobSpecError) as raised:
        rendered(task(dag_folder, job_manifest=path))

    assert raised.value.field == "job_manifest"
    assert path in str(raised.value)


def test_the_dag_processor_reads_no_argument_as_a_file(dag_folder: Path) -> None:
    operator = task(dag_folder, image="t:1", args=["--config", "configs/model.yaml"], config_file="kubeconfig.yaml")

    operator.resolve_template_files()

    assert operator.args == ["--config", "configs/model.yaml"]
    assert operator.config_file == "kubeconfig.yaml"
