"""dev/cluster/noderunner runs as ``python3 -m noderunner`` from dev/cluster: importable the same way here."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev" / "cluster"))
