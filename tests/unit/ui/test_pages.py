"""The pages' scripts, run in node with a stub DOM: a slow server is never sent a pile of requests, and
nothing the API answers reaches the page unescaped."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

NODE = shutil.which("node")
HARNESS = Path(__file__).with_name("pages.js")
pytestmark = pytest.mark.skipif(NODE is None, reason="node runs the pages' scripts")


def run(page: str, answer: Any, ticks: int = 0) -> dict[str, Any]:
    text = answer if isinstance(answer, str) else json.dumps(answer)
    result = subprocess.run(
        [str(NODE), str(HARNESS), page, text, str(ticks)], capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(result.stdout)


def test_the_jobs_page_sends_no_request_while_the_last_is_unanswered():
    # Ten refresh periods pass while the first request is still on its way.
    assert run("jobs.html", "hang", ticks=10)["requests"] == 1


INJECTED = "<img src=x onerror=alert(1)>"


def test_every_value_the_tab_shows_is_escaped():
    job = {
        "kind": "PyTorchJob",
        "namespace": "ml",
        "name": "a",
        "state": "running",
        "queue": None,
        "gpus_held": INJECTED,
        "queued_seconds": 1,
        "running_seconds": None,
        "progress": "p",
        "waiting": None,
        "failure": None,
        "timeline": [],
        "conditions": [],
        "log": None,
        "replicas": [
            {
                "type": "Master",
                "desired": INJECTED,
                "active": 1,
                "succeeded": 0,
                "failed": 0,
                "restarts": 0,
                "gpus_per_replica": 1,
            }
        ],
        "pods": [{"replica": "master-0", "phase": "Running", "restarts": INJECTED, "problems": []}],
        "events": [{"object": "a", "reason": "BackOff", "message": "m", "count": INJECTED, "time": "t"}],
    }
    shown = run("task_instance.html", {"job": job})["content"]
    assert "<img" not in shown
    assert shown.count("&lt;img src=x onerror=alert(1)&gt;") == 4
