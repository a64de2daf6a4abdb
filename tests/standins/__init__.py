"""Stand-ins for ``torchrun`` and ``mpirun`` in the decorators' unit tests (see each script's docstring).

The unit tests check the decorators' entrypoint in isolation: the stand-ins start its processes with
the variables the real launchers give them, without a rendezvous, ssh or MPI. The real launchers run
in the integration tests, on the local cluster's executing node (dev/cluster/README.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

STANDINS_DIR = Path(__file__).resolve().parent


def path_with_standins(env: Mapping[str, str], python_bin: str) -> str:
    """A PATH that finds the stand-ins first (even where Open MPI or torch is installed), then ``python_bin``'s python.

    A real ``mpirun`` here would read the mpi-operator's variables (``OMPI_MCA_plm_rsh_agent``, the
    hostfile) the test sets for the pod and try to reach workers that do not exist.
    """
    return os.pathsep.join([str(STANDINS_DIR), python_bin, env.get("PATH", os.defpath)])
