"""Stand-ins for ``torchrun`` and ``mpirun`` on a machine without torch or MPI (see each script's docstring)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

STANDINS_DIR = Path(__file__).resolve().parent
LAUNCHERS = ("torchrun", "mpirun")


def missing_launchers() -> list[str]:
    """The launchers this machine lacks, which the stand-ins replace."""
    return [name for name in LAUNCHERS if shutil.which(name) is None]


def path_with_standins(env: Mapping[str, str], python_bin: str) -> str:
    """A PATH that finds the stand-ins only for launchers that are absent, and ``python_bin``'s python first.

    The stand-ins directory comes after the real PATH, so an installed torchrun or mpirun wins.
    """
    return os.pathsep.join([python_bin, env.get("PATH", os.defpath), str(STANDINS_DIR)])
