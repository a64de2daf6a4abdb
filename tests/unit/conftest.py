"""Shared fixtures of the unit tests: real manifests, job status objects and pods as YAML files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"


class _ApiServerLoader(yaml.SafeLoader):
    """A YAML loader that reads objects the way they arrive from the API server (JSON).

    Timestamps stay strings, as in the API's JSON, instead of becoming ``datetime`` objects.
    """


_ApiServerLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def fixture_path(relative: str) -> Path:
    """Path of a file under ``tests/fixtures``, e.g. ``fixture_path("manifests/pytorchjob.yaml")``."""
    path = FIXTURES_DIR / relative
    if not path.is_file():
        raise FileNotFoundError(f"no fixture file {relative!r} under {FIXTURES_DIR}")
    return path


def read_yaml(relative: str) -> dict[str, Any]:
    """A fresh dict from a fixture file (each call parses again, so tests may mutate the result)."""
    return yaml.load(fixture_path(relative).read_text(), Loader=_ApiServerLoader)


@pytest.fixture
def load_yaml() -> Callable[[str], dict[str, Any]]:
    """``load_yaml("manifests/pytorchjob.yaml")``: a fixture file as a fresh dict."""
    return read_yaml


@pytest.fixture
def fixture_file() -> Callable[[str], Path]:
    """``fixture_file("manifests/mpijob.yaml")``: the path of a fixture file."""
    return fixture_path


@pytest.fixture
async def apiserver(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fake Kubernetes API server on loopback (``tests/unit/fake_apiserver.py``), with short lingers."""
    from airflow_provider_disttrain.hooks import shared_watch
    from tests.unit.fake_apiserver import FakeApiServer

    monkeypatch.setattr(shared_watch, "LINGER_SECONDS", 0.05)
    server = FakeApiServer()
    await server.start()
    yield server
    await server.stop()
