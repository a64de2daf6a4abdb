"""Only ``job_manifest`` is read as a template file, in a real ``dag.test()`` run on the local cluster:
an absolute manifest path is rendered, and arguments naming ``.yaml``/``.json`` files next to the DAG
reach the pods as the text the author wrote."""

from __future__ import annotations

from tests.integration.conftest import unique_dag_id

MANIFEST = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: templated
  annotations:
    disttrain.test/run-id: "{{ run_id }}"
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: busybox:1.36
              command: ["python", "train.py"]
              args: ["--config", "configs/model.yaml", "--metrics", "metrics.json"]
          volumes:
            - name: config
              configMap:
                name: train-config
                items: [{key: train.json, path: train.json}]
"""

DAG = """
import pendulum
from airflow.sdk import dag
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator

@dag(
    dag_id={dag_id!r},
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    template_searchpath=[{searchpath!r}],
)
def pipeline():
    PyTorchJobOperator(task_id="train", job_manifest={manifest!r}, wait_for_completion=False)

pipeline()
"""


def test_an_absolute_manifest_is_rendered_and_file_names_inside_it_stay_text(
    namespace, run_dag, jobs, airflow_db, tmp_path
):
    # Files with those names next to the DAG: Airflow's template_ext would have read them in.
    (airflow_db / "configs").mkdir(exist_ok=True)
    (airflow_db / "configs" / "model.yaml").write_text("layers: 48\n")
    (airflow_db / "metrics.json").write_text("{}\n")
    manifest = tmp_path / "shared" / "pytorchjob.yaml"  # outside the DAG folder, in its template_searchpath
    manifest.parent.mkdir()
    manifest.write_text(MANIFEST)
    dag_id = unique_dag_id("templates")

    result = run_dag(dag_id, DAG.format(dag_id=dag_id, manifest=str(manifest), searchpath=str(manifest.parent)))

    assert result.task_state("train") == "success"
    live = jobs.get("pytorchjobs", namespace, result.xcom("train")["name"])
    assert live["metadata"]["annotations"]["disttrain.test/run-id"] == result.dag_run.run_id
    pod_spec = live["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod_spec["containers"][0]["args"] == ["--config", "configs/model.yaml", "--metrics", "metrics.json"]
    assert pod_spec["volumes"][0]["configMap"]["items"] == [{"key": "train.json", "path": "train.json"}]
