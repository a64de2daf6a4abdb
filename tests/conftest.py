"""Test-wide setup: a throwaway Airflow home, configured before anything imports Airflow.

Airflow reads ``AIRFLOW_HOME`` and its ``AIRFLOW__*`` settings once, when ``airflow`` is first
imported, so they are set here at import time (pytest imports this file before any test module).
Every test run gets its own home with a sqlite database and an empty DAGs folder, so the tests never
touch ``~/airflow`` and work from a clean clone. The database is only created by the ``airflow_db``
fixture, for the tests that run DAGs with ``dag.test()``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="disttrain-tests-airflow-"))
DAGS_FOLDER = AIRFLOW_HOME / "dags"
DAGS_FOLDER.mkdir()
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)

os.environ.update(
    {
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
    }
)
# Operator defaults are computed from these at import time; the tests expect Airflow's defaults.
os.environ.pop("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", None)


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """Airflow's metadata database (sqlite in the test home), created once per session.

    Yields the DAGs folder: ``dag.test()`` only runs DAGs whose file lies inside it.
    """
    from airflow.utils import db

    db.initdb()
    yield DAGS_FOLDER
