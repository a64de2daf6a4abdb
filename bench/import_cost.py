"""Import overhead of the provider's operators, beside the cncf provider's SparkKubernetesOperator.

Every DAG file that uses an operator pays for importing it each time the DAG processor parses the
file, so importing the operators must not pull in ``kubernetes``, ``kubernetes_asyncio`` or the
cncf provider, nor OpenLineage: those are imported only when a task runs. The budget is 50 ms on top of
``airflow.sdk``. The UI plugin's
module counts too: every process that loads plugins imports it.

Each sample is a fresh interpreter that imports ``airflow.sdk`` first and then times only the
target's imports, so Airflow's own start-up cost is left out. The provider and the reference are
sampled alternately so that load on the machine affects both alike. The interpreter also reports
which heavy modules the target's imports loaded (modules already loaded by ``airflow.sdk`` are not
counted against the target).

    python bench/import_cost.py              # print the table
    python bench/import_cost.py --check      # exit 1 if over budget or a heavy module leaked
    python bench/import_cost.py --repeat 15 --verbose
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

PROVIDER_IMPORTS = """\
from airflow_provider_disttrain.operators.pytorch_job import PyTorchJobOperator
from airflow_provider_disttrain.operators.mpi_job import MPIJobOperator
from airflow_provider_disttrain.sensors.training_job import TrainingJobSensor
from airflow_provider_disttrain import PyTorchJobOperator
from airflow_provider_disttrain.ui.plugin import DisttrainUIPlugin
"""

REFERENCE_IMPORTS = """\
from airflow.providers.cncf.kubernetes.operators.spark_kubernetes import SparkKubernetesOperator
"""

# OpenLineage (the optional [openlineage] extra) is imported only when a listener asks a task for its
# lineage (operators/lineage.py): never by a DAG file.
HEAVY_MODULES = (
    "kubernetes",
    "kubernetes_asyncio",
    "airflow.providers.cncf.kubernetes",
    "openlineage",
    "airflow.providers.openlineage",
    # The UI plugin is loaded by every Airflow process (a DAG processor too); its FastAPI app by the API
    # server only, on its first request.
    "fastapi",
)

BUDGET_MS = 50.0

# Runs in the fresh interpreter; its one argument is a JSON object {"code": ..., "heavy": [...]}.
# A heavy name counts with its submodules: airflow.sdk's configuration code already imports the
# cncf provider's package (for its provider info), but not e.g. its operators or utils.
_CHILD = """\
import json, sys, time
config = json.loads(sys.argv[1])
start = time.perf_counter()
import airflow.sdk
baseline = time.perf_counter() - start
before = set(sys.modules)
start = time.perf_counter()
exec(compile(config["code"], "<imports>", "exec"), {})
elapsed = time.perf_counter() - start
new = set(sys.modules) - before
def under(heavy, names):
    return [h for h in heavy if any(n == h or n.startswith(h + ".") for n in names)]
print(config["marker"] + json.dumps({
    "seconds": elapsed,
    "baseline_seconds": baseline,
    "new_modules": sorted(new),
    "heavy_new": under(config["heavy"], new),
    "heavy_preloaded": under(config["heavy"], before),
}))
"""

_MARKER = "IMPORT_COST_RESULT:"


@dataclass(frozen=True)
class Sample:
    seconds: float
    baseline_seconds: float
    new_modules: tuple[str, ...]
    heavy_new: tuple[str, ...]
    heavy_preloaded: tuple[str, ...]


@dataclass(frozen=True)
class Summary:
    label: str
    samples: tuple[Sample, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(s.seconds for s in self.samples) * 1000

    @property
    def min_ms(self) -> float:
        return min(s.seconds for s in self.samples) * 1000

    @property
    def heavy_new(self) -> list[str]:
        # Any sample counts: a module imported only sometimes is still a leak.
        return sorted({m for s in self.samples for m in s.heavy_new})


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # Without bytecode caches every sample would time compiling the sources, not importing them
    # (some environments set this variable globally); the warm-up sample writes the caches.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure_once(
    code: str, python: str = sys.executable, heavy: Sequence[str] = HEAVY_MODULES, timeout: float = 300
) -> Sample:
    """Imports ``code`` in a fresh interpreter after ``airflow.sdk`` and reports what it cost."""
    config = json.dumps({"code": code, "heavy": list(heavy), "marker": _MARKER})
    proc = subprocess.run(
        [python, "-c", _CHILD, config],
        capture_output=True,
        text=True,
        env=_child_env(),
        timeout=timeout,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(_MARKER)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"importing in {python} failed (exit code {proc.returncode}):\n{code}\n{tail}")
    data = json.loads(lines[-1][len(_MARKER) :])
    return Sample(
        seconds=data["seconds"],
        baseline_seconds=data["baseline_seconds"],
        new_modules=tuple(data["new_modules"]),
        heavy_new=tuple(data["heavy_new"]),
        heavy_preloaded=tuple(data["heavy_preloaded"]),
    )


def heavy_modules_imported(
    code: str = PROVIDER_IMPORTS, python: str = sys.executable, heavy: Sequence[str] = HEAVY_MODULES
) -> list[str]:
    """The heavy modules that importing ``code`` loads on top of ``airflow.sdk``, in a fresh interpreter."""
    return list(measure_once(code, python=python, heavy=heavy).heavy_new)


def run(
    repeat: int,
    python: str = sys.executable,
    heavy: Sequence[str] = HEAVY_MODULES,
) -> tuple[Summary, Summary]:
    targets = {"provider": PROVIDER_IMPORTS, "reference": REFERENCE_IMPORTS}
    for code in targets.values():
        measure_once(code, python=python, heavy=heavy)  # warm-up: bytecode caches, disk cache
    samples: dict[str, list[Sample]] = {name: [] for name in targets}
    for _ in range(repeat):
        for name, code in targets.items():
            samples[name].append(measure_once(code, python=python, heavy=heavy))
    return Summary("provider", tuple(samples["provider"])), Summary("reference", tuple(samples["reference"]))


def _modules_under(roots: Sequence[str], modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == r or m.startswith(r + ".") for r in roots))


def _top_level_packages(modules: Sequence[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules})


def report(provider: Summary, reference: Summary, budget_ms: float, verbose: bool) -> list[str]:
    """Prints the table; returns the reasons the provider fails the budget (empty when it passes)."""
    rows = [
        ("provider: PyTorchJobOperator, MPIJobOperator, TrainingJobSensor", provider),
        ("reference: cncf SparkKubernetesOperator", reference),
    ]
    width = max(len(label) for label, _ in rows)
    baseline_ms = statistics.median(s.baseline_seconds for s in provider.samples + reference.samples) * 1000
    print(
        f"Import time on top of airflow.sdk (itself {baseline_ms:.0f} ms), "
        f"{len(provider.samples)} fresh interpreters each, Python {platform.python_version()}"
    )
    print(f"{'target':<{width}}  {'median ms':>9}  {'min ms':>8}  {'modules':>7}  heavy modules imported")
    for label, summary in rows:
        modules = statistics.median(len(s.new_modules) for s in summary.samples)
        heavy = ", ".join(summary.heavy_new) or "none"
        timings = f"{summary.median_ms:>9.1f}  {summary.min_ms:>8.1f}"
        print(f"{label:<{width}}  {timings}  {modules:>7.0f}  {heavy}")
    ratio = provider.median_ms / reference.median_ms
    print(f"ratio provider/reference (medians): {ratio:.3f}, i.e. {ratio:.1%} of the reference's cost")
    preloaded = sorted({m for s in provider.samples for m in s.heavy_preloaded})
    if preloaded:
        print(f"partly loaded by airflow.sdk itself (only the rest counts): {', '.join(preloaded)}")
    if verbose:
        packages = _top_level_packages(provider.samples[0].new_modules)
        print(f"packages newly imported by the provider: {', '.join(packages)}")

    failures = []
    if provider.median_ms >= budget_ms:
        failures.append(f"provider import overhead {provider.median_ms:.1f} ms >= budget {budget_ms:.0f} ms")
    if provider.heavy_new:
        culprits = _modules_under(provider.heavy_new, {m for s in provider.samples for m in s.new_modules})
        shown = ", ".join(culprits[:8]) + (", ..." if len(culprits) > 8 else "")
        failures.append(f"provider imports heavy modules: {', '.join(provider.heavy_new)} ({shown})")
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="fresh interpreters per target (default 7)")
    parser.add_argument("--check", action="store_true", help="exit 1 if over budget or a heavy module leaked")
    parser.add_argument("--budget-ms", type=float, default=BUDGET_MS, help="default %(default)s")
    parser.add_argument("--python", default=sys.executable, help="interpreter to measure (default: this one)")
    parser.add_argument("--verbose", action="store_true", help="list the packages the provider imports")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")

    try:
        provider, reference = run(args.repeat, python=args.python)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failures = report(provider, reference, args.budget_ms, args.verbose)
    for failure in failures:
        print(f"FAIL: {failure}")
    return 1 if failures and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
