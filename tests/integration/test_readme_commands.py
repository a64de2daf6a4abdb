"""The shell commands of the README and of docs/development/, run as written: installing the provider
into a fresh environment, testing a DAG on the local cluster, the demo, and the development targets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.readme import DOCS, README, block_under

# `make demo` trains for real on the executing node (CPU-bound): it joins the executing-node tests'
# xdist_group, one such test at a time. The other commands run on kwok's nodes or on no cluster at all,
# and run beside any test.

REPO = README.parent


def _bash(script: str, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO,
        env=env,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, f"{script}\n--- stdout\n{result.stdout[-5000:]}\n--- stderr\n{result.stderr[-5000:]}"
    return result


def _clean_env(tmp_path: Path) -> dict[str, str]:
    """The user's shell: no test-suite Airflow settings, no CI step timer (.ci/run's STEP_TIMES), a fresh
    AIRFLOW_HOME."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW") and key != "STEP_TIMES"}
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow-home")
    return env


def test_install_into_a_fresh_environment_registers_the_provider(tmp_path):
    block = block_under("Install into an existing Airflow", "bash")
    venv = tmp_path / "venv"
    subprocess.run(["uv", "venv", "-q", "-p", sys.executable, str(venv)], check=True)
    env = _clean_env(tmp_path)
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    # `pip install ./airflow-provider-disttrain`: here the checkout is the repository itself; uv's pip
    # stands in for pip (same arguments, and it reuses the wheels `make venv` downloaded).
    script = block.replace("pip install ./airflow-provider-disttrain", f"uv pip install -q {REPO}")

    result = _bash(script, env)

    assert "airflow-provider-disttrain" in result.stdout


def test_testing_your_own_dags_on_the_local_cluster(tmp_path, admin_api):
    block = block_under("Testing your own DAGs on the local cluster", "bash", DOCS / "development" / "local-cluster.md")
    # The cluster serves the rest of the suite; CI stops it at the end (`make cluster-down` in .ci/run).
    script = "\n".join(line for line in block.splitlines() if line.strip() != "make cluster-down")

    result = _bash(script, _clean_env(tmp_path))

    assert "cluster already up" in result.stdout + result.stderr
    assert "DagRun Finished: dag_id=disttrain_manifest_first" in result.stdout + result.stderr
    assert "state=success" in result.stdout + result.stderr


@pytest.mark.xdist_group("executing")
def test_make_demo_summarises_a_successful_run(tmp_path, admin_api):
    result = _bash("make demo", _clean_env(tmp_path))

    out = result.stdout
    assert "DAG run" in out and ": success" in out
    assert "promote_model          success" in out
    assert "Training job: PyTorchJob disttrain-demo/train-" in out and "-> succeeded in" in out
    # It trained for real: a loss curve from the streamed log, an accuracy evaluate computed itself.
    losses = [float(m) for m in re.findall(r"epoch \d+: loss ([0-9.]+)", out)]
    assert len(losses) >= 2 and losses[-1] < losses[0], out
    accuracy = float(re.search(r"Accuracy evaluate computed from model.json on \d+ held-out rows: ([0-9.]+)", out)[1])
    assert accuracy > 0.9
    assert "Promoted model: /" in out
    # And it says what still stands in for the real thing.
    assert "What is real and what is not" in out and "process runner" in out


def test_development_targets(tmp_path):
    env = _clean_env(tmp_path)

    assert "unit-test" in _bash("make help", env).stdout
    assert "kube-apiserver" in _bash("make cluster-status", env).stdout
    bench = _bash("make bench", env, timeout=600).stdout
    assert "ratio" in bench.lower()
