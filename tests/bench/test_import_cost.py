"""bench/import_cost.py: importing the operators must not pull in kubernetes or the cncf provider.

These check behaviour (which modules an import loads, in a fresh interpreter), never timings:
timings on a shared CI machine are too noisy to assert on. The timing budget is checked by
``python bench/import_cost.py --check``.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "import_cost.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script(SCRIPT, "import_cost_under_test")


def test_provider_operators_import_no_heavy_module(bench: ModuleType) -> None:
    assert bench.heavy_modules_imported(bench.PROVIDER_IMPORTS) == []


def test_detector_sees_kubernetes_and_cncf_submodules(bench: ModuleType) -> None:
    # Guards the test above against passing vacuously. airflow.sdk already imports the cncf
    # provider's package for its provider info, so a submodule import must still be caught.
    leaked = bench.heavy_modules_imported("from airflow.providers.cncf.kubernetes import kube_client\n")
    assert "kubernetes" in leaked
    assert "airflow.providers.cncf.kubernetes" in leaked


def test_detector_sees_openlineage(bench: ModuleType) -> None:
    # The operators' lineage methods import it when a listener calls them; a DAG file must not.
    leaked = bench.heavy_modules_imported("from airflow_provider_disttrain.lineage import facets as lineage_facets\n")
    assert {"openlineage", "airflow.providers.openlineage"} <= set(leaked)


def test_detector_sees_fastapi(bench: ModuleType) -> None:
    # The UI plugin is loaded by every Airflow process; its FastAPI app only by the API server.
    assert "fastapi" in bench.heavy_modules_imported("from airflow_provider_disttrain.ui import app\n")


def test_failed_import_is_reported(bench: ModuleType) -> None:
    with pytest.raises(RuntimeError, match="ModuleNotFoundError: No module named 'no_such_module_xyz'"):
        bench.measure_once("import no_such_module_xyz\n")


def _summary(bench: ModuleType, label: str, ms: list[float], heavy: tuple[str, ...] = ()) -> object:
    samples = tuple(
        bench.Sample(
            seconds=m / 1000,
            baseline_seconds=1.0,
            new_modules=("airflow_provider_disttrain", *(f"{h}.client" for h in heavy)),
            heavy_new=heavy,
            heavy_preloaded=(),
        )
        for m in ms
    )
    return bench.Summary(label, samples)


def test_report_passes_within_budget(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    provider = _summary(bench, "provider", [20.0, 10.0, 30.0])
    reference = _summary(bench, "reference", [500.0, 400.0, 600.0], heavy=("kubernetes",))
    assert bench.report(provider, reference, budget_ms=50.0, verbose=False) == []
    out = capsys.readouterr().out
    assert "ratio provider/reference (medians): 0.040" in out
    assert "kubernetes" in out  # the reference's heavy modules are shown, not held against it


def test_report_fails_over_budget_or_on_a_leak(bench: ModuleType) -> None:
    reference = _summary(bench, "reference", [500.0])
    slow = _summary(bench, "provider", [60.0, 40.0, 55.0])
    assert bench.report(slow, reference, budget_ms=50.0, verbose=False) == [
        "provider import overhead 55.0 ms >= budget 50 ms"
    ]
    # A heavy module imported in any one sample is a leak.
    leaky = bench.Summary(
        "provider",
        (
            *_summary(bench, "provider", [10.0]).samples,
            *_summary(bench, "provider", [12.0], heavy=("kubernetes_asyncio",)).samples,
        ),
    )
    assert bench.report(leaky, reference, budget_ms=50.0, verbose=False) == [
        "provider imports heavy modules: kubernetes_asyncio (kubernetes_asyncio.client)"
    ]


def test_check_sets_the_exit_code(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = _summary(bench, "provider", [80.0])
    reference = _summary(bench, "reference", [500.0])
    monkeypatch.setattr(bench, "run", lambda repeat, python: (slow, reference))
    assert bench.main(["--repeat", "1"]) == 0
    assert bench.main(["--repeat", "1", "--check"]) == 1
    assert bench.main(["--repeat", "1", "--check", "--budget-ms", "100"]) == 0
