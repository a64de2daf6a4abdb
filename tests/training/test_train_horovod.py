"""The parts of training/horovod/train_horovod.py that need neither torch nor horovod.

Loaded from its path (it is copied alone into its image), with torch and horovod blocked so
that an import of either at module level, or in these helpers, fails the tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

TRAINING = Path(__file__).resolve().parents[2] / "training"


@pytest.fixture(autouse=True)
def no_torch_or_horovod(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry makes the import raise ImportError even where the package is installed.
    for name in ("torch", "horovod", "horovod.torch"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.fixture
def hvd_script(no_torch_or_horovod: None) -> ModuleType:
    return load_script(TRAINING / "horovod" / "train_horovod.py", "train_horovod_under_test")


def test_argument_defaults(hvd_script: ModuleType) -> None:
    args = hvd_script.parse_args([])
    assert (args.epochs, args.data, args.output_dir, args.batch_size) == (3, None, Path("/mnt/output"), 64)


def test_arguments_used_by_the_example_dags(hvd_script: ModuleType) -> None:
    args = hvd_script.parse_args(["--epochs", "2", "--output-dir", "/mnt/out", "--data", "/d/train.csv"])
    assert (args.epochs, args.output_dir, args.data) == (2, Path("/mnt/out"), Path("/d/train.csv"))


@pytest.mark.parametrize("argv", [["--epochs", "0"], ["--lr", "-0.1"], ["--samples", "0"]])
def test_invalid_arguments_exit(hvd_script: ModuleType, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        hvd_script.parse_args(argv)
    assert exc.value.code == 2


def test_write_metrics(hvd_script: ModuleType, tmp_path: Path) -> None:
    path = hvd_script.write_metrics(tmp_path / "out", loss=0.5, accuracy=0.75, epochs=2, world_size=4)
    assert json.loads(path.read_text()) == {"loss": 0.5, "accuracy": 0.75, "epochs": 2, "world_size": 4}
    assert sorted(p.name for p in path.parent.iterdir()) == ["metrics.json"]


def test_epoch_line_format(hvd_script: ModuleType) -> None:
    assert hvd_script.format_epoch_line(2, 0.05, 0.987654) == "epoch=2 loss=0.0500 accuracy=0.9877"


def test_load_csv(hvd_script: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "train.csv"
    path.write_text("x,y,label\n1,2,0\n3,4,2\n")
    assert hvd_script.load_csv(path) == ([[1.0, 2.0], [3.0, 4.0]], [0, 2])
    path.write_text("1,2,0\n3,4\n")
    with pytest.raises(ValueError, match=r"train\.csv:2: expected 3 columns, got 2"):
        hvd_script.load_csv(path)


@pytest.mark.parametrize(
    "text",
    ["a,b,label\n0.5,1,1\n2,2,0\n", "1,2,3\n", "1,2,x\n", "1,2,1.5\n", "1,2\n1\n", "", "h1,h2\n1,2\nbad,3\n"],
)
def test_copied_helpers_match_the_ddp_scripts(hvd_script: ModuleType, tmp_path: Path, text: str) -> None:
    # Both images ship one file each, so the helpers are copies; this keeps them from drifting.
    ddp = load_script(TRAINING / "pytorch" / "train_ddp.py", "train_ddp_for_comparison")
    path = tmp_path / "data.csv"
    path.write_text(text)

    def outcome(module: ModuleType) -> object:
        try:
            return module.load_csv(path)
        except ValueError as exc:
            return f"ValueError: {exc}"

    assert outcome(hvd_script) == outcome(ddp)

    for module, out in ((hvd_script, tmp_path / "h"), (ddp, tmp_path / "d")):
        module.write_metrics(out, loss=1 / 3, accuracy=2 / 3, epochs=1, world_size=2)
    assert (tmp_path / "h" / "metrics.json").read_text() == (tmp_path / "d" / "metrics.json").read_text()
    assert hvd_script.format_epoch_line(3, 1 / 3, 2 / 3) == ddp.format_epoch_line(3, 1 / 3, 2 / 3)
    for module, name in ((hvd_script, "h.log"), (ddp, "d.log")):
        module.write_termination_message(
            {"accuracy": 2 / 3}, {"DISTTRAIN_TERMINATION_MESSAGE_PATH": str(tmp_path / name)}
        )
    assert (tmp_path / "h.log").read_text() == (tmp_path / "d.log").read_text()
