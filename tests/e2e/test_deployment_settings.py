"""The local deployment runs on its own settings, whatever the shell that starts it exports.

Airflow ranks ``AIRFLOW__SECTION__KEY`` variables above airflow.cfg, reads another file from
``AIRFLOW_CONFIG``, and lets ``AIRFLOW_CONN_*``/``AIRFLOW_VAR_*`` shadow what the metadata database
holds. An Airflow user's shell often exports some of them; ``make airflow-up`` must not hand them to
the processes it starts (dev/airflow/lib.sh drops them).
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
from pathlib import Path

from tests.e2e.conftest import DEVAIRFLOW_DIR, REPO

AIRFLOW_SCRIPTS = REPO / "dev" / "airflow"
# What a user's shell may carry: another DAGs folder and executor, another config file, a connection
# and a variable that would shadow the deployment's own.
CALLER_ENV = {
    "AIRFLOW__CORE__DAGS_FOLDER": "/elsewhere/dags",
    "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "sqlite:////elsewhere/airflow.db",
    "AIRFLOW_CONFIG": "/elsewhere/airflow.cfg",
    "AIRFLOW_CONN_KUBERNETES_DEFAULT": "kubernetes://?kube_config_path=/elsewhere/kubeconfig",
    "AIRFLOW_VAR_DISTTRAIN_SIMULATED_METRICS": "{}",
}
READ_SETTINGS = """
import json, os
from airflow.configuration import conf
print(json.dumps({
    "dags_folder": conf.get("core", "dags_folder"),
    "executor": conf.get("core", "executor"),
    "sql_alchemy_conn": conf.get("database", "sql_alchemy_conn"),
    "config_file": os.environ.get("AIRFLOW_CONFIG"),
    "env_connection": os.environ.get("AIRFLOW_CONN_KUBERNETES_DEFAULT"),
    "env_variable": os.environ.get("AIRFLOW_VAR_DISTTRAIN_SIMULATED_METRICS"),
}))
"""


def test_the_deployment_ignores_the_callers_airflow_settings(tmp_path: Path) -> None:
    """config.sh renders a deployment into a scratch directory, then Python reads Airflow's settings in
    the environment dev/airflow/lib.sh gives every process that up.sh and supervise.sh start."""
    env = {
        **os.environ,
        **CALLER_ENV,
        "DEVAIRFLOW_DIR": str(tmp_path / "devairflow"),
        "DEVCLUSTER_DIR": str(tmp_path / "devcluster"),
    }
    subprocess.run(["bash", str(AIRFLOW_SCRIPTS / "config.sh")], env=env, check=True, capture_output=True)
    read = subprocess.run(
        ["bash", "-c", f'source {AIRFLOW_SCRIPTS / "lib.sh"} && exec "$VENV_BIN/python" -c "$0"', READ_SETTINGS],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    settings = json.loads(read.stdout.splitlines()[-1])

    assert settings["dags_folder"] == str(tmp_path / "devairflow" / "dags")
    assert settings["executor"] == "LocalExecutor"
    assert settings["sql_alchemy_conn"].startswith("postgresql+psycopg2://airflow@/airflow?host=")
    assert (settings["config_file"], settings["env_connection"], settings["env_variable"]) == (None, None, None)


def test_the_running_processes_carry_none_of_the_callers_airflow_variables() -> None:
    """The environment every process of the running deployment was started with (its supervisor's: the
    Airflow processes retitle themselves, which overwrites what /proc shows of their own) names Airflow
    only through AIRFLOW_HOME, the deployment's own, whatever the shell that ran `make airflow-up` exported."""
    supervisors = sorted((DEVAIRFLOW_DIR / "pids").glob("*.supervisor.pid"))
    assert {p.name.removesuffix(".supervisor.pid") for p in supervisors} >= {"scheduler", "triggerer", "api-server"}
    for pid_file in supervisors:
        environ = Path(f"/proc/{pid_file.read_text().strip()}/environ").read_bytes().split(b"\0")
        variables = dict(entry.decode().partition("=")[::2] for entry in environ if entry)
        airflow_variables = {key: value for key, value in variables.items() if key.startswith("AIRFLOW")}
        assert airflow_variables == {"AIRFLOW_HOME": str(DEVAIRFLOW_DIR / "home")}, pid_file.name


def test_the_running_processes_hold_none_of_the_callers_open_files() -> None:
    """`flock LOCK make airflow-up` must not leave LOCK held by the daemons it started: none of the
    deployment's processes (nor PostgreSQL, nor the supervisors) has a file of the caller's open."""
    pids = [int(p.read_text()) for p in (DEVAIRFLOW_DIR / "pids").glob("*.pid")]
    postmaster = next((DEVAIRFLOW_DIR / "postgres").resolve().glob("data/postmaster.pid"))
    pids.append(int(postmaster.read_text().splitlines()[0]))
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd) if fd.is_symlink() else ""
            assert not target.endswith(".lock"), f"pid {pid} holds {target}"


def test_scheduler_options_and_queue_triggerers_are_set_through_devairflow_variables(tmp_path: Path) -> None:
    """use_job_schedule and queues_enabled are off unless DEVAIRFLOW_USE_JOB_SCHEDULE and
    DEVAIRFLOW_TRIGGERER_QUEUES say otherwise; each queue list of the latter is one more triggerer, started
    with --queues; OpenLineage events go to a file of the deployment either way."""
    devairflow = tmp_path / "devairflow"

    def render(**settings: str) -> tuple[configparser.ConfigParser, list[str]]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("DEVAIRFLOW_")}
        env.update(DEVAIRFLOW_DIR=str(devairflow), DEVCLUSTER_DIR=str(tmp_path / "c"), **settings)
        subprocess.run(["bash", str(AIRFLOW_SCRIPTS / "config.sh")], env=env, check=True, capture_output=True)
        listing = 'for p in "${AIRFLOW_PROCESSES[@]}"; do echo "$p: $(airflow_command "$p")"; done'
        script = f"source {AIRFLOW_SCRIPTS / 'lib.sh'} && {listing}"
        processes = subprocess.run(["bash", "-c", script], env=env, check=True, capture_output=True, text=True)
        config = configparser.ConfigParser(interpolation=None)
        config.read(devairflow / "home" / "airflow.cfg")
        return config, processes.stdout.splitlines()

    config, processes = render()
    assert (config["scheduler"]["use_job_schedule"], config["triggerer"]["queues_enabled"]) == ("False", "False")
    assert json.loads(config["openlineage"]["transport"]) == {
        "type": "file",
        "log_file_path": str(devairflow / "logs" / "openlineage.jsonl"),
        "append": True,
    }
    assert processes == [
        "scheduler: scheduler",
        "dag-processor: dag-processor",
        "triggerer: triggerer",
        "api-server: api-server",
    ]

    config, processes = render(
        DEVAIRFLOW_USE_JOB_SCHEDULE="True",
        DEVAIRFLOW_TRIGGERERS="2",
        DEVAIRFLOW_TRIGGERER_QUEUES="default training,gpu",
    )
    assert (config["scheduler"]["use_job_schedule"], config["triggerer"]["queues_enabled"]) == ("True", "True")
    assert processes[3:6] == [
        "triggerer-2: triggerer --skip-serve-logs",
        "triggerer-for-default: triggerer --skip-serve-logs --queues default",
        "triggerer-for-training,gpu: triggerer --skip-serve-logs --queues training,gpu",
    ]
