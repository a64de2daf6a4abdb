"""Runs a decorated task's function inside the training pods. Standard library only (no Airflow in the image).

Two ways in:

* ``python -m airflow_provider_disttrain.decorators.entrypoint``: run the function in this process.
  Under ``torchrun`` (PyTorchJob) every local process is started so; the global rank comes from
  ``RANK`` (torchrun), ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK`` or ``PMIX_RANK``. Rank 0 writes what the
  function returned, as JSON, to the termination message (``/dev/termination-log``, or
  ``$DISTTRAIN_TERMINATION_MESSAGE_PATH``), from which the Airflow task takes its XCom. A failure of
  rank 0 (the function raised, or its value is not JSON or over 4 KB) is written there instead, so
  the task's failure explanation shows it.
* ``... --mpirun [--mpi-implementation OpenMPI] [-- MPIRUN_ARGS...]`` in an MPIJob's launcher: start
  the function on every slot with ``mpirun`` (forwarding the payload variable and ``PYTHONPATH``),
  pass the ranks' output through, and keep rank 0's result line: rank 0 runs in a worker pod, whose
  termination message nobody reads, so it prints the result for the launcher to write.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_provider_disttrain.decorators.payload import (
    DEFAULT_TERMINATION_PATH,
    ENTRYPOINT_MODULE,
    PAYLOAD_ENV,
    RESULT_MARKER,
    RESULT_VIA_STDOUT_ENV,
    TERMINATION_PATH_ENV,
    clip_message,
    current_rank,
    decode_payload,
    encode_result,
)

# How each MPI implementation's launcher exports a variable of the launcher's environment to all ranks.
FORWARD_ENV: Mapping[str, Callable[[Sequence[str]], list[str]]] = {
    "OpenMPI": lambda names: [arg for name in names for arg in ("-x", name)],
    "Intel": lambda names: ["-genvlist", ",".join(names)],
    "MPICH": lambda names: ["-genvlist", ",".join(names)],
}


def call_function(payload: Mapping[str, Any]) -> Any:
    """Define the shipped function from its source and call it with the shipped arguments."""
    namespace: dict[str, Any] = {"__name__": "__disttrain_task__"}
    exec(compile(payload["source"], f"<decorated task {payload['function']}>", "exec"), namespace)
    return namespace[payload["function"]](*payload["args"], **payload["kwargs"])


def write_termination_message(text: str, env: Mapping[str, str]) -> None:
    with open(env.get(TERMINATION_PATH_ENV) or DEFAULT_TERMINATION_PATH, "w", encoding="utf-8") as file:
        file.write(text)


def _report(record: dict[str, str], env: Mapping[str, str]) -> None:
    """Hand rank 0's result (``{"result": json}``) or error (``{"error": text}``) on."""
    if env.get(RESULT_VIA_STDOUT_ENV):
        print(RESULT_MARKER + json.dumps(record), flush=True)
    else:
        write_termination_message(record.get("result", clip_message(record.get("error", ""))), env)


def run_rank(env: Mapping[str, str]) -> int:
    """Run the function as this rank; raise what it raises (the traceback goes to the pod's log)."""
    payload = decode_payload(env.get(PAYLOAD_ENV))
    rank = current_rank(env)
    try:
        value = call_function(payload)
        message = encode_result(value) if rank == 0 else None
    except Exception as error:
        if rank == 0:
            _report({"error": f"{payload['function']} failed on rank 0: {type(error).__name__}: {error}"}, env)
        raise
    if message is not None:
        _report({"result": message}, env)
    return 0


def forwarded_variables(env: Mapping[str, str]) -> list[str]:
    """What every rank needs from the launcher's environment: the payload, how to report, and the
    ``PYTHONPATH`` (when set) by which this entrypoint was found. The ranks run the same interpreter and
    module in the workers, but an ssh session starts with the system's environment, not the image's
    (an image's ``ENV PYTHONPATH`` never reaches it)."""
    return [PAYLOAD_ENV, RESULT_VIA_STDOUT_ENV, *(["PYTHONPATH"] if env.get("PYTHONPATH") else [])]


def mpirun_command(implementation: str, extra_args: Sequence[str], python: str, env: Mapping[str, str]) -> list[str]:
    if implementation not in FORWARD_ENV:
        raise ValueError(f"--mpi-implementation: {implementation!r} is not one of {', '.join(FORWARD_ENV)}")
    forward = FORWARD_ENV[implementation](forwarded_variables(env))
    return ["mpirun", *forward, *extra_args, python, "-m", ENTRYPOINT_MODULE]


def launch_mpirun(implementation: str, extra_args: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``mpirun``, echo its output, and write rank 0's result (or the failure) as the termination message."""
    # The launcher and the workers run the same image, so this interpreter's path is valid on the workers.
    command = mpirun_command(implementation, extra_args, sys.executable, env)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env={**env, RESULT_VIA_STDOUT_ENV: "1"})
    record: dict[str, str] | None = None
    assert process.stdout is not None
    for line in process.stdout:
        at = line.find(RESULT_MARKER)
        if at >= 0:
            record = json.loads(line[at + len(RESULT_MARKER) :])
            continue
        sys.stdout.write(line)
        sys.stdout.flush()
    code = process.wait()
    if record is not None and "result" in record and code == 0:
        write_termination_message(record["result"], env)
        return 0
    if record is not None and "error" in record:
        write_termination_message(clip_message(record["error"]), env)
    elif code == 0:
        write_termination_message("mpirun succeeded but rank 0 reported no result", env)
    else:
        write_termination_message(f"mpirun exited with code {code}; the ranks' output is in the launcher's log", env)
    return code or 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {ENTRYPOINT_MODULE}", description=__doc__.splitlines()[0])
    parser.add_argument("--mpirun", action="store_true", help="run the function on every MPI slot (MPIJob launcher)")
    parser.add_argument("--mpi-implementation", default="OpenMPI", choices=sorted(FORWARD_ENV))
    parser.add_argument("mpirun_args", nargs="*", help="extra mpirun arguments, after --")
    options = parser.parse_args(argv)
    if options.mpirun:
        return launch_mpirun(options.mpi_implementation, options.mpirun_args, os.environ)
    return run_rank(os.environ)


if __name__ == "__main__":
    sys.exit(main())
