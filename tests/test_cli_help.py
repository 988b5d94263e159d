"""``--help`` of every subcommand gives each option's default and the format of its value."""

from __future__ import annotations

import argparse

import pytest

from specbayes.cli import HelpFormatter, _formats, build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _flat(text: str) -> str:
    """``text`` without white space: help is wrapped at spaces and hyphens."""
    return "".join(text.split())


@pytest.mark.parametrize("command", sorted(_subcommands()))
def test_every_option_says_its_default_and_format(command):
    parser = _subcommands()[command]
    text = _flat(parser.format_help())
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        name = action.option_strings[-1]
        # every option is explained: by its own help or by what the formatter adds
        assert action.help or HelpFormatter._notes(action), f"{command} {name}: no help"
        default = action.default
        if default not in (None, False, True) and "default" not in (action.help or "").lower():
            shown = ",".join(map(str, default)) if isinstance(default, list) else str(default)
            assert _flat(f"default: {shown}") in text, (
                f"{command} {name}: default {shown} not shown"
            )
        fmt = _formats().get(action.type)
        if fmt and not action.choices and "format" not in (action.help or ""):
            assert _flat(f"format: {fmt}") in text, f"{command} {name}: format not shown"


def test_fit_help_names_the_sampler_defaults():
    """fit's sampler options name the model's one configuration (kept in sync here: the
    help does not import PyMC to read them)."""
    from specbayes.fit import SAMPLER_DEFAULTS
    from specbayes.model.sampling import SAMPLER_CONFIG

    text = _flat(_subcommands()["fit"].format_help())
    for option in ("chains", "draws", "tune", "cores"):
        help_text = next(
            a.help for a in _subcommands()["fit"]._actions if f"--{option}" in a.option_strings
        )
        assert f"(default: {SAMPLER_CONFIG[option]}" in help_text, option
    assert _flat(f"(default: {SAMPLER_DEFAULTS['seed']})") in text
