"""``exec_token_plugin.py`` as a credential plugin that misbehaves on demand, as aws or gcloud do.

The file named by ``PLUGIN_MODE_FILE`` says what the next run does: ``ok`` (the real plugin: a fresh
TokenRequest token), ``fail-once`` (exit 1 with a throttling message, then ``ok`` again: a throttled STS
call) or ``hang`` (never answer). Every run appends its mode to ``PLUGIN_MODE_FILE``'s ``.runs`` file.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import exec_token_plugin  # the real plugin, beside this file (the script's folder is on sys.path)


def main() -> None:
    mode_file = Path(os.environ["PLUGIN_MODE_FILE"])
    mode = mode_file.read_text().strip() if mode_file.exists() else "ok"
    with mode_file.with_suffix(".runs").open("a") as runs:
        runs.write(mode + "\n")
    if mode == "hang":
        time.sleep(120)  # far beyond the client's build timeout; killed by it
    if mode == "fail-once":
        mode_file.write_text("ok")
        sys.stderr.write("An error occurred (Throttling) when calling the GetCallerIdentity operation: Rate exceeded")
        sys.exit(1)
    exec_token_plugin.main()


if __name__ == "__main__":
    main()
