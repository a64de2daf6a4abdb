"""Every example DAG imports without errors in a DagBag, without touching a cluster."""

from __future__ import annotations

from pathlib import Path

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "example_dags"
EXPECTED = {
    "disttrain_retraining_pipeline",
    "disttrain_horovod_mpi",
    "disttrain_elastic_pytorch",
    "disttrain_hyperparameter_sweep",
    "disttrain_manifest_first",
    "disttrain_taskflow_decorators",
    "disttrain_trainjob_finetune",
    "disttrain_orphaned_job_cleanup",
}


def test_every_example_dag_imports_cleanly():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(EXAMPLES_DIR))

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == EXPECTED


def test_example_operators_validate_their_parameters_at_parse_time():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(EXAMPLES_DIR))
    train = bag.dags["disttrain_retraining_pipeline"].get_task("train")

    assert train.kind == "PyTorchJob"
    assert train.deferrable is True
    assert train.cleanup_policy.on_finish == "succeeded"
    assert train.pod_options.shm_size == "2Gi"


def test_the_trainjob_example_runs_on_torch_distributed():
    from airflow.dag_processing.dagbag import DagBag

    finetune = DagBag(str(EXAMPLES_DIR)).dags["disttrain_trainjob_finetune"].get_task("finetune")

    assert (finetune.kind, finetune.runtime, finetune.num_nodes) == ("TrainJob", "torch-distributed", 2)
    assert finetune.deferrable is True
