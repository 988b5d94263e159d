"""The ``specbayes ingest`` subcommand (driven through its own parser, as cli.py does)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import pytest

from specbayes import cli
from specbayes.ingest import commands

FIX = Path(__file__).parent / "fixtures" / "ingest"
REAL = Path(__file__).resolve().parents[1] / "data" / "real"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="specbayes")
    commands.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["ingest", *argv])
    return args.func(args)


def test_registered_in_cli():
    assert "specbayes.ingest.commands" in cli.COMMAND_MODULES


def test_ingest_writes_table_and_prints_summary(tmp_path, capsys):
    out = tmp_path / "sweeps.csv"
    code = run(
        [
            str(FIX / "guidellm_v2.json.gz"),
            str(FIX / "vllm_append_result.json"),
            "--hardware",
            "H100-SXM",
            "--verifier",
            "tiny",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "guidellm v2 (0.8.1), 6 row(s)" in text
    assert "vllm bench serve (JSON Lines), 3 row(s)" in text
    assert "9 row(s), 5 flagged saturated" in text
    assert "throughput strategy" in text and "validation:" in text
    df = pd.read_csv(out)
    assert len(df) == 9 and (df.hardware == "H100-SXM").all()


def test_ingest_sd_labels_parquet(tmp_path):
    out = tmp_path / "sweeps.parquet"
    code = run(
        [
            str(FIX / "guidellm_v1.json"),
            "--hardware",
            "A100",
            "--drafter",
            "eagle",
            "--k",
            "3",
            "--acceptance-length",
            "2.5",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    df = pd.read_parquet(out)
    assert (df.k == 3).all() and (df.alpha_source == "acceptance_length").all()


def test_alpha_and_acceptance_length_are_exclusive():
    with pytest.raises(SystemExit):
        run([str(FIX / "vllm_default.json"), "--alpha", "0.5", "--acceptance-length", "2"])


def test_bad_file_raises_value_error_for_the_cli():
    with pytest.raises(ValueError, match="truncated"):
        run([str(FIX / "truncated.json"), "--hardware", "A"])


def test_fit_and_compare_on_real_data(capsys):
    code = run([str(REAL / "speculators_qwen3.8-27b_b200_sweeps.csv"), "--fit", "--compare"])
    assert code == 0
    text = capsys.readouterr().out
    assert "least-squares L = C1 + N*C2" in text
    assert "math_reasoning: mtp (k=2) vs dense" in text
    assert "SD faster" in text
