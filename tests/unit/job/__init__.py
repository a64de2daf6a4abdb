"""Tests of ``airflow_provider_disttrain.job``: the job and one observation of it."""
