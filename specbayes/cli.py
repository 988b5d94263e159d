"""The ``specbayes`` command.

Each subcommand lives next to the code it drives, in a module exposing
``register(subparsers)``; that function only declares arguments and sets ``func`` —
heavy imports (PyMC, the simulator) happen inside the handler, so ``specbayes --help``
stays fast.

Error convention (every subcommand): a usage or input mistake prints **one line** on
stderr, ``specbayes <cmd>: <file/field>: <what is wrong> — <what to do>``, and exits with
status 2; a fit that fails its health checks under ``--strict`` exits with status 1. No
traceback is shown (``SPECBAYES_DEBUG=1`` shows it), and no partial output is left behind.

Signals: Ctrl-C (SIGINT) and SIGTERM stop any command within a few seconds — while reading,
compiling, sampling or writing — with one line, ``specbayes <cmd>: interrupted (SIGINT) —
stopped; nothing was written``, and exit status 130 (SIGINT) or 143 (SIGTERM), the shell's
``128 + signal``. Both raise :class:`Interrupted` (a ``KeyboardInterrupt``) in the main thread;
the commands write through a temporary file or folder moved into place last, so the
exception leaves nothing behind (:func:`specbayes.commands.fit.save_atomically`,
:func:`specbayes.artefacts.staged_dir`).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import signal
import sys
import threading
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
    "specbayes.commands.control",
)

#: Exit status of a usage or input error.
EXIT_USAGE = 2
#: Exit status of an unexpected failure (a bug: please report it).
EXIT_INTERNAL = 3

#: Exceptions that mean "the input or the request is wrong", not "specbayes is broken".
INPUT_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, KeyError, LookupError)


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by SIGINT or SIGTERM (:func:`install_signal_handlers`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: Signals received by this process (:func:`check_interrupted` re-raises the first one).
_RECEIVED: list[int] = []

#: The Python frames a signal interrupted, held until the command ends: unwinding them ran
#: llvmlite's ``__del__`` on a module numba was still building, and its native dispose
#: crashed the process with SIGSEGV after the one line was printed (``benchmarks/
#: interrupts.md``). The console script then ends with ``os._exit`` (:func:`main`), running
#: none of those destructors.
_HELD_FRAMES: list = []


def _raise_interrupted(signum: int, frame) -> None:
    _RECEIVED.append(signum)
    _HELD_FRAMES.append(frame)
    raise Interrupted(signum)


def _raise_again(signum: int, frame) -> None:
    if _RECEIVED:
        _HELD_FRAMES.append(frame)
        raise Interrupted(_RECEIVED[0])


def _swallowed(unraisable) -> None:
    """``sys.unraisablehook``: an :class:`Interrupted` raised while Python ran a callback of C
    code (numba's LLVM compiler calls some through ctypes) is printed and dropped by Python;
    raise it again 50 ms later instead, in whatever Python code runs then."""
    if isinstance(unraisable.exc_value, Interrupted):
        signal.signal(signal.SIGALRM, _raise_again)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        return
    sys.__unraisablehook__(unraisable)


def install_signal_handlers() -> dict:
    """SIGINT and SIGTERM raise :class:`Interrupted` (SIGTERM would otherwise kill the process
    without running the clean-up that removes partial output); returns what was replaced, for
    :func:`restore_signal_handlers` (nothing outside the main thread, where Python cannot set
    signal handlers)."""
    _RECEIVED.clear()
    _HELD_FRAMES.clear()
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGALRM] = signal.getsignal(signal.SIGALRM)
    previous["unraisablehook"] = sys.unraisablehook
    sys.unraisablehook = _swallowed
    return previous


def restore_signal_handlers(previous: dict) -> None:
    """Undo :func:`install_signal_handlers` (a pending re-raise is cancelled)."""
    if not previous:
        return
    signal.setitimer(signal.ITIMER_REAL, 0)
    sys.unraisablehook = previous.pop("unraisablehook")
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def check_interrupted() -> None:
    """Raise :class:`Interrupted` again if a signal arrived before: a library that catches
    ``KeyboardInterrupt`` (nutpie returns the draws so far) must not have its partial result
    written as if it were whole."""
    if _RECEIVED:
        raise Interrupted(_RECEIVED[0])


def exit_status(exc: KeyboardInterrupt) -> int:
    """130 for SIGINT (or a bare ``KeyboardInterrupt``), 143 for SIGTERM: 128 + signal."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def _formats() -> dict:
    """What each argument type of the CLI accepts, as ``--help`` says it."""
    from pathlib import Path

    from specbayes import commands as c

    return {
        int: "an integer",
        float: "a number",
        Path: "a path",
        c.positive_int: "an integer >= 1",
        c.nonneg_int: "an integer >= 0",
        c.positive_float: "a number > 0",
        c.nonneg_float: "a number >= 0",
        c.probability: "a number in (0, 1)",
        c.acceptance: "a number in (0, 1]",
        c.tokens: "a number >= 1",
        c.acceptance_length: "a number > 1",
        c.float_list: "comma-separated numbers >= 0, e.g. 0,5,10",
        c.int_list: "comma-separated integers >= 0, e.g. 0,2,4",
        c.acceptance_list: "comma-separated numbers in (0, 1], e.g. 0.6,0.8",
        c.positive_int_list: "comma-separated integers >= 1, e.g. 1,2,4",
    }


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` of every subcommand: each option's default and the format of its value.

    ``(default: X)`` is added unless the help already says its default, or there is none to
    show (``None``: the option is off or its value comes from the data or the model; a
    flag); ``format: ...`` comes from the option's ``type`` (:func:`_formats`) unless the
    help names choices or a format itself.
    """

    def _format_action(self, action: argparse.Action) -> str:
        notes = "" if action.help else self._notes(action)
        if notes:  # argparse skips an option without help: the notes are its help
            action = copy.copy(action)
            action.help, action.notes_only = notes, True
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        if getattr(action, "notes_only", False):
            return action.help
        text = (action.help or "").strip()
        notes = self._notes(action)
        return f"{text} ({notes})" if text and notes else text or notes

    @staticmethod
    def _notes(action: argparse.Action) -> str:
        """``format: ...; default: ...`` for ``action`` ('' when there is nothing to add)."""
        text = action.help or ""
        if not action.option_strings and action.nargs not in ("?", "*"):
            return ""  # a positional argument: required, its help says what it is
        notes = []
        fmt = _formats().get(action.type)
        if fmt and not action.choices and "format" not in text:
            notes.append(f"format: {fmt}")
        default = action.default
        shown = default not in (None, False, True, argparse.SUPPRESS)
        if shown and "%(default)" not in text and "default" not in text.lower():
            if isinstance(default, list | tuple):  # as it is typed: 0,1,2
                default = ",".join(str(v) for v in default)
            notes.append(f"default: {default}".replace("%", "%%"))
        return "; ".join(notes)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (not the usage block), and whose
    ``--help`` gives every option's default and format (:class:`HelpFormatter`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

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
    previous = install_signal_handlers()
    try:
        code = _main(argv)
    finally:  # an in-process caller (a test, a notebook) gets its handlers back
        restore_signal_handlers(previous)
    if argv is None and code in (130, 143):
        # the process is the command (the console script): end it now, without the
        # interpreter's finalisation, in which a native library stopped mid-call (LLVM
        # compiling numba code) can crash with SIGSEGV after the one line was printed
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _HELD_FRAMES.clear()  # an in-process caller goes on: let the interrupted frames go
    return code


def _main(argv: list[str] | None) -> int:
    try:
        parser = build_parser()
    except Exception:  # still importing the subcommands: what an interrupt broke
        if not _RECEIVED:
            raise
        return _report_interrupted("specbayes", Interrupted(_RECEIVED[0]))
    except KeyboardInterrupt as exc:
        return _report_interrupted("specbayes", exc)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    held: list[str] = []
    with warnings.catch_warnings():
        warnings.showwarning = _warning_keeper(args.command, held)
        code = _run(args)
    if code not in (EXIT_USAGE, 130, 143):  # a mistake or an interrupt: its one line alone
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
    command = f"specbayes {args.command}"
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        return _report_interrupted(command, exc)
    except Exception as exc:
        # what an interrupt broke is no mistake or bug (an extension module whose
        # initialisation a signal stopped raises "ImportError: initialization failed")
        if _RECEIVED:
            return _report_interrupted(command, Interrupted(_RECEIVED[0]))
        return _report_error(args.command, exc)


def _report_interrupted(command: str, exc: KeyboardInterrupt) -> int:
    """One line for an interrupt; later signals are ignored (the clean-up is done)."""
    if threading.current_thread() is threading.main_thread():
        signal.setitimer(signal.ITIMER_REAL, 0)  # no re-raise (_swallowed) pending
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    name = signal.Signals(exit_status(exc) - 128).name
    print(f"{command}: interrupted ({name}) — stopped; nothing was written", file=sys.stderr)
    return exit_status(exc)


def _report_error(command: str, exc: Exception) -> int:
    """An input error becomes one line and exit status 2, anything else (a bug) one line
    and exit status 3; ``SPECBAYES_DEBUG=1`` raises it instead."""
    if os.environ.get("SPECBAYES_DEBUG"):
        raise exc
    if isinstance(exc, INPUT_ERRORS):
        print(error_line(command, exc), file=sys.stderr)
        return EXIT_USAGE
    print(
        f"specbayes {command}: internal error ({type(exc).__name__}: "
        f"{one_line(str(exc), 200)}) — please report it; SPECBAYES_DEBUG=1 shows the traceback",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
