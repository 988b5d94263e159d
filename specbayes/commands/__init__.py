"""Subcommands of the ``specbayes`` CLI that belong to no single subpackage, and their helpers.

The ``argparse`` types here check ranges as they parse, so a value out of range is a one-line
usage error before any file is read (see :mod:`specbayes.cli` for the error convention).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = [
    "acceptance",
    "acceptance_length",
    "acceptance_list",
    "float_list",
    "int_list",
    "nonneg_float",
    "nonneg_int",
    "positive_float",
    "positive_int",
    "positive_int_list",
    "probability",
    "slo_spec",
    "tokens",
]


def _number(text: str, kind: type = float) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _checked(kind: type, ok: Callable[[float], bool], rule: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = _number(text, kind)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{rule}, got {text}")
        return value

    parse.__name__ = rule  # argparse names the type in some messages
    return parse


positive_float = _checked(float, lambda v: v > 0, "must be > 0")
nonneg_float = _checked(float, lambda v: v >= 0, "must be >= 0")
positive_int = _checked(int, lambda v: v >= 1, "must be an integer >= 1")
nonneg_int = _checked(int, lambda v: v >= 0, "must be an integer >= 0")
probability = _checked(float, lambda v: 0 < v < 1, "must lie strictly between 0 and 1")
acceptance = _checked(float, lambda v: 0 < v <= 1, "must lie in (0, 1] (per-token acceptance)")
tokens = _checked(float, lambda v: v >= 1, "must be >= 1 token")


def slo_spec(text: str) -> dict[str, float]:
    """``--slo SECONDS`` (mean latency) or ``--slo NAME=SECONDS,...`` (:mod:`specbayes.slo`)."""
    from specbayes.slo import parse_slo

    try:
        return parse_slo(text)
    except ValueError as exc:
        message = str(exc).removeprefix(f"--slo {text.strip()!r}: ")
        raise argparse.ArgumentTypeError(message) from None


acceptance_length = _checked(
    float, lambda v: v > 1, "must be > 1 (tokens committed per SD cycle, 1 + accepted / drafts)"
)


def _list(text: str, item: Callable[[str], float], what: str) -> list:
    parts = [x.strip() for x in text.split(",")]
    if not any(parts):
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}")
    try:
        return [item(x) for x in parts if x]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"in {text!r}: {exc}") from None


def float_list(text: str) -> list[float]:
    """``argparse`` type: comma-separated finite numbers >= 0 (rates, acceptance grids)."""
    return _list(text, nonneg_float, "numbers")


def int_list(text: str) -> list[int]:
    """``argparse`` type: comma-separated integers >= 0."""
    return _list(text, nonneg_int, "integers")


def acceptance_list(text: str) -> list[float]:
    """``argparse`` type: comma-separated acceptance probabilities in (0, 1]."""
    return _list(text, acceptance, "acceptance probabilities")


def positive_int_list(text: str) -> list[int]:
    """``argparse`` type: comma-separated integers >= 1."""
    return _list(text, positive_int, "integers")
