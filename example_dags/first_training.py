"""The README's first DAG, as a file: prepare data, train on 2 GPUs in each of 4 pods, evaluate.

Copy it into your DAGs folder as it stands. The fuller pipeline, with real data flow, is retraining_pipeline.py.
"""

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_provider_disttrain import PyTorchJobOperator

with DAG(dag_id="first_training", schedule=None) as dag:
    prepare = PythonOperator(task_id="prepare_data", python_callable=lambda: "s3://example-bucket/datasets/v3")
    train = PyTorchJobOperator(
        task_id="train",
        image="ghcr.io/acme/trainer:1.4",
        command=["torchrun", "/workspace/train_ddp.py"],
        args=["--data", "{{ ti.xcom_pull(task_ids='prepare_data') }}"],
        num_workers=3,  # + 1 Master: 4 pods
        gpus_per_replica=2,
    )
    evaluate = PythonOperator(
        task_id="evaluate",
        python_callable=lambda result: result.get("metrics", {}).get("accuracy", 0.0) > 0.9,
        op_args=[train.output],  # the job's result: name, state, replica statuses, the leader's metrics
    )
    prepare >> train >> evaluate
