"""Kubernetes quantities (``500m``, ``16Gi``, ``1e3``), as the API server reads them.

A port of Kubernetes' quantity parser, beside the other rules (``kube/rules.py``, which uses it); below
the parameters and the manifests, because the parameters (``PodOptions.shm_size``) check quantities as
well as the manifests do.
Pure functions: values in, problems (or values) out.
"""

from __future__ import annotations

import json
import math
import re
from decimal import ROUND_CEILING, Context, Decimal
from typing import Any

from airflow_provider_disttrain.exceptions import InvalidJobSpecError

# k8s.io/apimachinery/pkg/api/resource/quantity.go (parseQuantityString, ParseQuantity) and
# suffix.go (newSuffixer): <sign>?<digits>[.<digits>]<suffix>, where the suffix is a binary-SI one
# (Ki..Ei), a decimal-SI one (n u m "" k M G T P E) or a decimal exponent e<int>/E<int>. The Go parser
# also takes "-", "." and "1.G"-like oddities as zero, but the CRDs' generated schema pattern for
# every Quantity field rejects those at create time, so the value must satisfy both: this regex is
# that intersection (the schema pattern with the exponent narrowed to the integer strconv.ParseInt
# accepts). Before parsing, the Quantity's JSON decoder trims surrounding whitespace, but the schema
# pattern sees the raw string, so whitespace is refused too.
_QUANTITY = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([KMGTPE]i)|([numkMGTPE])|[eE]([+-]?[0-9]+))?$")
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_NANO = Decimal("1e-9")
# Quantities are capped at the int64 range rather than refused (quantity.go, "The max is just a simple cap").
_MAX_QUANTITY = Decimal(2**63 - 1)
# Exact arithmetic for any value below the cap with nine decimals; exponents beyond +-100 only cap or round.
_CONTEXT = Context(prec=60)
_EXPONENT_LIMIT = 100
QUANTITY_HELP = "a Kubernetes quantity such as '500m', '2', '16Gi', '1.5G' or '1e3'"


def quantity_text(value: object) -> str | None:
    """The text the API server will parse: a string as is, a number as its JSON form; None for other types."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, str) else json.dumps(value)


def parse_quantity(value: object) -> Decimal | None:
    """The quantity's value as the API server computes it, or None when the server would refuse it.

    Like ``ParseQuantity``, values are rounded up (away from zero) to a multiple of 1n and capped at
    2^63-1 in magnitude.
    """
    text = quantity_text(value)
    if text is None:
        return None
    match = _QUANTITY.fullmatch(text)
    if match is None:
        return None
    sign, number, binary, decimal_si, exponent = match.groups()
    amount = Decimal(number if not number.endswith(".") else number[:-1] or "0")
    if binary:
        amount = _CONTEXT.multiply(amount, 2 ** _BINARY_SI[binary])
    elif decimal_si:
        amount = _CONTEXT.scaleb(amount, _DECIMAL_SI[decimal_si])
    elif exponent:
        amount = _CONTEXT.scaleb(amount, max(-_EXPONENT_LIMIT, min(_EXPONENT_LIMIT, int(exponent))))
    amount = min(amount, _MAX_QUANTITY)
    if amount != 0:
        amount = amount.quantize(_NANO, rounding=ROUND_CEILING, context=_CONTEXT)
    return -amount if sign == "-" else amount


def quantity_problem(value: object) -> str | None:
    """Why the API server would refuse ``value`` as a quantity, or None when it is one."""
    if quantity_text(value) is None:
        return f"must be {QUANTITY_HELP}, got {value!r} ({type(value).__name__})"
    if parse_quantity(value) is None:
        return f"{value!r} is not {QUANTITY_HELP} (suffixes are case-sensitive: Ki Mi Gi Ti Pi Ei, m k M G T P E)"
    return None


def validate_size_limit(value: Any, field: str) -> None:
    """An ``emptyDir.sizeLimit`` (what ``shm_size`` sets): a non-negative quantity."""
    if problem := quantity_problem(value):
        raise InvalidJobSpecError(field, problem)
    amount = parse_quantity(value)
    if amount is not None and amount < 0:
        raise InvalidJobSpecError(field, f"must be greater than or equal to 0, got {value!r}")
