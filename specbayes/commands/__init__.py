"""Subcommands of the ``specbayes`` CLI that belong to no single subpackage, and their helpers."""

from __future__ import annotations

import argparse


def float_list(text: str) -> list[float]:
    """``argparse`` type: comma-separated numbers."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        message = f"expected comma-separated numbers, got {text!r}"
        raise argparse.ArgumentTypeError(message) from exc


def int_list(text: str) -> list[int]:
    """``argparse`` type: comma-separated integers."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from exc
