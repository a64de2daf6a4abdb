"""The trigger, the shared watch and the operators' base stay readable in one sitting (issue 27: each
under 450 lines).

Each grew by concerns of its own (the Kueue Workload follower, the stored rows' formats, the watch's
cache, its registry; the operator's rendering of its templated fields); those live in modules of their
own, and a new concern should too.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from airflow_provider_disttrain.hooks import shared_watch
from airflow_provider_disttrain.operators import base
from airflow_provider_disttrain.triggers import training_job

MAX_LINES = 450


@pytest.mark.parametrize("module", [training_job, shared_watch, base], ids=lambda module: module.__name__)
def test_the_module_stays_under_the_bound(module: ModuleType) -> None:
    assert module.__file__ is not None
    lines = len(Path(module.__file__).read_text().splitlines())
    assert lines < MAX_LINES, f"{module.__name__} has {lines} lines; move a whole concern into a module of its own"
