"""The ``specbayes`` command.

Each subcommand lives next to the code it drives, in a module exposing
``register(subparsers)``; that function only declares arguments and sets ``func`` —
heavy imports (PyMC, the simulator) happen inside the handler, so ``specbayes --help``
stays fast.

Error convention (every subcommand): a usage or input mistake prints **one line** on
stderr, ``specbayes <cmd>: <file/field>: <what is wrong> — <what to do>``, and exits with
status 2; a fit that fails its health checks under ``--strict`` exits with status 1. No
traceback is shown (``SPECBAYES_DEBUG=1`` shows it), and no partial output is left behind.
"""

from __future__ import annotations

import argparse
import importlib
import os
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

#: Exit status of a usage or input error.
EXIT_USAGE = 2
#: Exit status of an unexpected failure (a bug: please report it).
EXIT_INTERNAL = 3

#: Exceptions that mean "the input or the request is wrong", not "specbayes is broken".
INPUT_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, KeyError, LookupError)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (not the usage block)."""

    def error(self, message: str) -> None:
        sys.stderr.write(f"{self.prog}: {one_line(message)} — see `{self.prog} --help`\n")
        sys.exit(EXIT_USAGE)


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line (line breaks become ``; ``), cut at ``limit`` characters."""
    parts = [p.strip() for p in str(text).splitlines() if p.strip()]
    parts = [p[2:] if p.startswith("- ") else p for p in parts]  # list bullets
    line = "; ".join(parts) or "(no message)"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _hint(command: str, exc: BaseException) -> str:
    """What to do, for messages that do not say it themselves."""
    from specbayes.data import SweepValidationError
    from specbayes.ingest._common import IngestError

    if isinstance(exc, SweepValidationError):
        return "fix or remove those rows (the table's schema: docs/model.md, 'Data')"
    if isinstance(exc, IngestError):
        return "fix the file, or pass --skip-invalid to skip files that cannot be read"
    if isinstance(exc, FileNotFoundError):
        return "check the path"
    if isinstance(exc, IsADirectoryError | NotADirectoryError):
        return "give a file path"
    if isinstance(exc, PermissionError):
        return "check the file's permissions"
    return f"see `specbayes {command} --help`"


def _validation_text(exc) -> str:
    """The first violated rule of a :class:`~specbayes.data.SweepValidationError` (missing
    columns together), its rows, and how many more rules failed."""
    missing = [f for r, f, _ in exc.violations if r.startswith("required column missing")]
    if missing:
        return (
            f"{exc.source}: required column(s) missing: {', '.join(missing)} — the sweep table "
            "needs verifier, hardware, prefill, decode, k, rps, latency (docs/model.md, 'Data')"
        )
    rule, field, rows = exc.violations[0]
    if field == "*" and rule == "table is empty":
        return f"{exc.source}: no data rows (a header only?) — give a table with sweep rows"
    shown = ", ".join(str(r) for r in rows[:5]) + (" …" if len(rows) > 5 else "")
    text = f"{exc.source}: field '{field}': {rule}" + (f" (rows {shown})" if rows else "")
    more = len(exc.violations) - 1
    return text + (f" (and {more} more rule(s) violated)" if more else "")


def error_line(command: str, exc: BaseException) -> str:
    """The one-line message for an input error raised by a subcommand."""
    from specbayes.data import SweepValidationError

    if isinstance(exc, SweepValidationError) and exc.violations:
        text = _validation_text(exc)
    elif isinstance(exc, KeyError) and exc.args:
        text = f"missing entry {exc.args[0]!r}"
    elif isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.filename}: {exc.strerror.lower()}"
    else:
        text = str(exc) or type(exc).__name__
    text = one_line(text)
    if " — " not in text:
        text = f"{text} — {_hint(command, exc)}"
    return f"specbayes {command}: {text}"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand registered."""
    parser = OneLineParser(
        prog="specbayes",
        description="Does speculative decoding make my service faster at the load it really "
        "sees — and how sure are we?",
    )
    parser.add_argument("--version", action="version", version=f"specbayes {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
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
    """Entry point of the ``specbayes`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    held: list[str] = []
    with warnings.catch_warnings():
        warnings.showwarning = _warning_keeper(args.command, held)
        code = _run(args)
    if code != EXIT_USAGE:  # a mistake is answered by its one line alone
        for text in dict.fromkeys(held):  # each distinct warning once
            sys.stderr.write(text)
    return code


def _warning_keeper(command: str, held: list[str]):
    """``warnings.showwarning`` keeping one line ``specbayes <cmd>: warning: <message>`` per
    warning in ``held``: :func:`main` prints them when the command ends, unless it ended in
    an input error, whose one line then stands alone."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        held.append(f"specbayes {command}: warning: {one_line(str(message))}\n")

    return show


def _run(args: argparse.Namespace) -> int:
    """Run the subcommand; input errors become one line and exit status 2."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"specbayes {args.command}: interrupted — nothing more was written", file=sys.stderr)
        return 130
    except INPUT_ERRORS as exc:
        if os.environ.get("SPECBAYES_DEBUG"):
            raise
        print(error_line(args.command, exc), file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug, not a mistake of the user's: still one line
        if os.environ.get("SPECBAYES_DEBUG"):
            raise
        print(
            f"specbayes {args.command}: internal error ({type(exc).__name__}: "
            f"{one_line(str(exc), 200)}) — please report it; SPECBAYES_DEBUG=1 shows the "
            "traceback",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
