"""The ``specbayes`` command.

Each subcommand lives next to the code it drives, in a module exposing
``register(subparsers)``; that function only declares arguments and sets ``func`` —
heavy imports (PyMC, the simulator) happen inside the handler, so ``specbayes --help``
stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from specbayes import __version__

#: Modules that contribute subcommands, in the order they appear in ``--help``.
COMMAND_MODULES: tuple[str, ...] = (
    "specbayes.commands.demo",
    "specbayes.sim.commands",
    "specbayes.ingest.commands",
    "specbayes.commands.fit",
    "specbayes.commands.plan",
    "specbayes.commands.validate",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="specbayes",
        description="Does speculative decoding make my service faster at the load it really "
        "sees — and how sure are we?",
    )
    parser.add_argument("--version", action="version", version=f"specbayes {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if not (name == missing or name.startswith(missing + ".")):
                raise  # a real import error inside an existing module

            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``specbayes`` console script."""
    # PyTensor warns on every import when no system BLAS is linked (pip installs); the models
    # here are elementwise and matrix-vector work that NumPy's own BLAS serves, so the
    # warning is noise on a command line.
    warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"specbayes {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
