"""What a decorated task ships into its training job, and what rank 0 sends back. Standard library only.

The Airflow side (``encode_payload``) and the pod side (``decode_payload``, ``encode_result``) share
these names and limits, so both ends agree without Airflow being installed in the image.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

ENTRYPOINT_MODULE = "airflow_provider_disttrain.decorators.entrypoint"
PAYLOAD_ENV = "DISTTRAIN_TASK_PAYLOAD"
"""The function's source, name and JSON arguments, in one environment variable of every replica."""
TERMINATION_PATH_ENV = "DISTTRAIN_TERMINATION_MESSAGE_PATH"
"""Where rank 0's result is written; Kubernetes' default ``terminationMessagePath`` when unset."""
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
RESULT_VIA_STDOUT_ENV = "DISTTRAIN_RESULT_VIA_STDOUT"
"""Set by the MPI launcher: rank 0 runs in a worker pod, so it prints its result for the launcher to keep."""
RESULT_MARKER = "DISTTRAIN_RANK0_RESULT "
# Linux refuses (E2BIG) any single environment string "NAME=value" longer than MAX_ARG_STRLEN (128 KiB);
# the job object and each pod, which carry the variable, are stored in etcd (1.5 MiB per request by default).
MAX_PAYLOAD_BYTES = 120_000
# The kubelet keeps at most 4096 bytes of a container's termination message.
MAX_TERMINATION_MESSAGE_BYTES = 4096
# The global rank of this process, as torchrun (RANK), Open MPI, MPICH/Intel MPI (Hydra) and PMIx set it.
RANK_ENV_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


class PayloadError(ValueError):
    """The decorated function's arguments cannot be shipped into the job."""


class ResultError(ValueError):
    """The value rank 0 returned cannot become the task's XCom."""


def _json_problem(value: Any) -> str | None:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as error:
        return str(error)
    return None


def encode_payload(function_name: str, source: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The JSON text of the payload; a ``PayloadError`` naming the argument that is not JSON, or the size."""
    arguments = [(f"positional argument {index}", value) for index, value in enumerate(args)]
    arguments += [(f"argument {name!r}", value) for name, value in kwargs.items()]
    for label, value in arguments:
        if problem := _json_problem(value):
            raise PayloadError(
                f"{function_name}: {label} ({type(value).__name__}) cannot be shipped into the training job: "
                f"the decorated function's arguments travel as JSON ({problem}). Pass something the function "
                "can load itself instead, such as a path or URL."
            )
    text = json.dumps({"function": function_name, "source": source, "args": list(args), "kwargs": dict(kwargs)})
    size = len(text.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadError(
            f"{function_name}: its source and arguments take {size} bytes as JSON, more than the "
            f"{MAX_PAYLOAD_BYTES} a training job can carry: they travel in the environment variable {PAYLOAD_ENV} "
            "of every replica, Linux refuses one environment string over 128 KiB, and the job and its pods are "
            "stored in etcd (1.5 MiB per object by default). Pass large data by reference (a path or URL)."
        )
    return text


def decode_payload(text: str | None) -> dict[str, Any]:
    if not text:
        raise PayloadError(f"{PAYLOAD_ENV} is not set: this entrypoint runs the function a decorated task ships")
    payload = json.loads(text)
    if not isinstance(payload, dict) or not {"function", "source", "args", "kwargs"} <= payload.keys():
        raise PayloadError(f"{PAYLOAD_ENV} is not a decorated task's payload")
    return payload


def encode_result(value: Any) -> str:
    """Rank 0's return value as the termination message: JSON within the kubelet's 4 KB."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as error:
        raise ResultError(
            f"the value rank 0 returned ({type(value).__name__}) cannot become the task's XCom: it travels as "
            f"JSON in the pod's termination message ({error})"
        ) from None
    size = len(text.encode())
    if size > MAX_TERMINATION_MESSAGE_BYTES:
        raise ResultError(
            f"the value rank 0 returned takes {size} bytes as JSON, more than the {MAX_TERMINATION_MESSAGE_BYTES} "
            "bytes Kubernetes keeps of a termination message, through which it becomes the task's XCom: return "
            "a small summary (metrics, a path) and write large outputs to storage"
        )
    return text


def clip_message(text: str) -> str:
    """An error text cut to what the kubelet keeps of a termination message (whole characters)."""
    return text.encode()[:MAX_TERMINATION_MESSAGE_BYTES].decode(errors="ignore")


def current_rank(env: Mapping[str, str]) -> int:
    """This process's global rank (0 when run alone, outside torchrun and mpirun)."""
    for name in RANK_ENV_VARS:
        if env.get(name, "").strip().isdigit():
            return int(env[name])
    return 0
