"""The sweep schema: validation errors, alpha derivation, saturation rules, readers."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specbayes import data, laws

COEFS = dict(c1p=0.05, c1v=1.1e-3, c1d=1e-4, c2p=0.002, c2v=6.6e-5, c2d=2e-5)


def law_sweep(k: int = 0, alpha: float = np.nan, decode: int = 512, n: int = 9) -> pd.DataFrame:
    """An exact open-loop sweep of the cycle-decomposition law, up to 90 % of saturation."""
    c1, c2 = laws.effective_costs(*COEFS.values(), decode, alpha if k else 0.5, k)
    rps = np.linspace(0.1, 0.9 / c2, n)
    return pd.DataFrame(
        dict(
            verifier="Qwen3-8B",
            hardware="H100-SXM",
            prefill=512,
            decode=decode,
            k=k,
            alpha=alpha,
            rps=rps,
            target_rps=rps,
            latency=laws.latency(rps, c1, c2),
        )
    )


@pytest.fixture
def sweeps() -> pd.DataFrame:
    return pd.concat([law_sweep(), law_sweep(3, 0.7)], ignore_index=True)


def test_clean_table_passes_unchanged(sweeps):
    table = data.validate_sweeps(sweeps)
    assert len(table.data) == len(sweeps)
    assert table.excluded.empty
    assert set(table.data["drafter"]) == {"none", "unspecified"}
    assert set(table.data["cell"]) == {"512x512"}
    assert table.data.loc[table.data.k == 0, "alpha"].isna().all()
    assert set(table.data["alpha_source"]) == {"dense", "given"}
    assert "none excluded" in table.summary()


@pytest.mark.parametrize(
    ("column", "row", "value", "field", "rule"),
    [
        ("latency", 2, -1.0, "latency", "latency must be > 0"),
        ("latency", 3, np.nan, "latency", "latency must be > 0"),
        ("alpha", 11, 1.5, "alpha", r"alpha must lie in \(0, 1\]"),
        ("alpha", 12, 0.0, "alpha", r"alpha must lie in \(0, 1\]"),
        ("k", 4, -2, "k", "k must be >= 0"),
        ("k", 5, 1.5, "k", "k must be an integer"),
        ("rps", 6, -0.5, "rps", "rps must be >= 0"),
        ("decode", 7, 0, "decode", "decode must be >= 1"),
        ("latency", 8, "fast", "latency", "must be numeric"),
    ],
)
def test_each_bad_input_names_field_rows_and_rule(sweeps, column, row, value, field, rule):
    bad = sweeps.astype({column: object if isinstance(value, str) else float})
    bad.loc[row, column] = value
    with pytest.raises(data.SweepValidationError, match=rule) as err:
        data.validate_sweeps(bad, source="mysweeps.csv")
    message = str(err.value)
    assert message.startswith("mysweeps.csv:")
    assert f"field '{field}'" in message
    assert f"rows [{row}]" in message


@pytest.mark.parametrize(
    ("column", "value", "rule"),
    [
        ("ttft_p90", 0.5, r"ttft_p50 must be <= ttft_p90 \(percentiles p50 <= p90 <= p95 <= p99\)"),
        ("latency_p95", -1.0, "latency_p95 must be > 0 and finite"),
        ("itl_p99", np.inf, "itl_p99 must be >= 0 and finite"),
        ("tpot", -0.001, "tpot must be >= 0 and finite"),
    ],
)
def test_timing_percentiles_validated(sweeps, column, value, rule):
    good = sweeps.assign(ttft_p50=1.0, ttft_p90=2.0, ttft_p99=3.0, latency_p95=np.nan)
    data.validate_sweeps(good)  # p95 not reported: p50 <= p90 <= p99 is all there is to check
    bad = good.copy()
    bad.loc[3, column] = value
    with pytest.raises(data.SweepValidationError, match=rule) as err:
        data.validate_sweeps(bad, source="pct.csv")
    assert str(err.value).startswith("pct.csv:")
    ((_, field, rows),) = err.value.violations  # one rule broken, on the one row changed
    assert field == ("ttft_p50" if column == "ttft_p90" else column) and rows == [3]


def test_percentile_order_skips_levels_not_reported(sweeps):
    bad = sweeps.assign(itl_p50=0.02, itl_p99=0.01)  # no p90/p95: p50 is compared with p99
    with pytest.raises(
        data.SweepValidationError, match="field 'itl_p50': itl_p50 must be <= itl_p99"
    ):
        data.validate_sweeps(bad)


def test_all_violations_reported_in_one_error(sweeps):
    bad = sweeps.copy()
    bad.loc[1, "latency"] = 0.0
    bad.loc[10, "alpha"] = 2.0
    with pytest.raises(data.SweepValidationError) as err:
        data.validate_sweeps(bad)
    assert len(err.value.violations) == 2


def test_missing_column_and_empty_table(sweeps):
    with pytest.raises(data.SweepValidationError, match="field 'latency': required column"):
        data.validate_sweeps(sweeps.drop(columns="latency"))
    with pytest.raises(data.SweepValidationError, match="table is empty"):
        data.validate_sweeps(sweeps.iloc[:0])


def test_alpha_required_for_sd_rows_unless_latent(sweeps):
    no_alpha = sweeps.copy()
    no_alpha.loc[no_alpha.k > 0, "alpha"] = np.nan
    with pytest.raises(data.SweepValidationError, match="alpha required where k > 0"):
        data.validate_sweeps(no_alpha)
    table = data.validate_sweeps(no_alpha, allow_unknown_alpha=True)
    assert (table.data.loc[table.data.k > 0, "alpha_source"] == "unknown").all()


def test_alpha_derived_from_marginal_and_acceptance_length(sweeps):
    df = sweeps.copy()
    sd = df.index[df.k > 0]
    df.loc[sd, "alpha"] = np.nan
    df.loc[sd[:4], "acceptance_marginal"] = laws.marginal_acceptance(0.7, 3)
    df.loc[sd[4:], "acceptance_length"] = laws.expected_tokens(0.7, 3)
    table = data.validate_sweeps(df)
    np.testing.assert_allclose(table.data.loc[sd, "alpha"], 0.7, atol=1e-9)
    assert list(table.data.loc[sd, "alpha_source"].unique()) == ["marginal", "acceptance_length"]


def test_conflicting_duplicates_error_exact_duplicates_excluded(sweeps):
    dup = pd.concat([sweeps, sweeps.iloc[[3]]], ignore_index=True)
    table = data.validate_sweeps(dup)
    assert list(table.excluded["reason"]) == ["duplicate of row 3"]
    dup.loc[len(dup) - 1, "latency"] *= 1.5
    with pytest.raises(data.SweepValidationError, match="conflicting duplicates") as err:
        data.validate_sweeps(dup)
    assert f"rows [3, {len(dup) - 1}]" in str(err.value)


def test_saturation_rules_each_listed(sweeps):
    df = sweeps.copy()
    df["saturated"] = False
    df["preemptions"] = 0
    df.loc[1, "saturated"] = True
    df["saturation_reason"] = ""
    df.loc[1, "saturation_reason"] = "tool flagged over-saturation"
    df.loc[2, "preemptions"] = 1  # a single preemption already leaves the steady state
    df.loc[3, "rps"] = 0.5 * df.loc[3, "target_rps"]  # could not keep up
    df.loc[8, "latency"] *= 3  # a knee past the law's asymptote
    table = data.validate_sweeps(df)
    reasons = table.excluded["reason"].to_dict()
    assert reasons == {
        1: "saturated: tool flagged over-saturation",
        2: "preempted",
        3: "rate_shortfall",
        8: "latency_growth",
    }
    assert len(table.data) + len(table.excluded) == len(df)
    assert "4 excluded" in table.summary()


def test_growth_rule_does_not_flag_clean_steep_sweep():
    steep = law_sweep(n=9)
    c1, c2 = laws.effective_costs(*COEFS.values(), 512, 0.5, 0)
    steep["rps"] = np.linspace(0.1, 0.97 / c2, 9)
    steep["latency"] = laws.latency(steep["rps"], c1, c2)
    assert data.validate_sweeps(steep).excluded.empty


def test_closed_loop_rows_keep_concurrency_and_derive_rps():
    n = np.array([1, 2, 4, 8, 16, 32.0])
    lat = laws.closed_loop_latency(n, 8.0, 0.05)
    df = pd.DataFrame(
        dict(
            verifier="V",
            hardware="B200",
            prefill=200,
            decode=700,
            k=0,
            rps=np.nan,
            concurrency=n,
            latency=lat,
        )
    )
    table = data.validate_sweeps(df)
    np.testing.assert_allclose(table.data["rps"], n / lat)
    assert table.excluded.empty
    df.loc[5, "latency"] = 40.0  # way above 8 + 32 * 0.05 = 9.6: past the knee
    assert list(data.validate_sweeps(df).excluded.index) == [5]


def test_read_sweeps_csv_and_parquet(tmp_path, sweeps):
    csv = tmp_path / "s.csv"
    sweeps.to_csv(csv, index=False)
    parquet = tmp_path / "s.parquet"
    sweeps.to_parquet(parquet)
    for path in (csv, parquet):
        df = data.read_sweeps(path)
        assert df.attrs["source"] == str(path)
        assert len(data.validate_sweeps(df).data) == len(sweeps)
    bad = data.read_sweeps(csv)
    bad.loc[0, "latency"] = -1
    with pytest.raises(data.SweepValidationError, match=f"^{csv}"):
        data.validate_sweeps(bad)
    with pytest.raises(FileNotFoundError, match="no such sweep file"):
        data.read_sweeps(tmp_path / "missing.csv")
    (tmp_path / "s.txt").write_text("x")
    with pytest.raises(ValueError, match="unsupported sweep file type"):
        data.read_sweeps(tmp_path / "s.txt")


def test_measured_alpha_rows_form_one_sweep():
    df = law_sweep(3, 0.7)
    df = df.drop(columns="alpha").assign(
        acceptance_length=laws.expected_tokens(np.linspace(0.68, 0.72, len(df)), 3)
    )
    table = data.validate_sweeps(df)
    assert table.data["sweep"].nunique() == 1
    assert "alpha=measured" in table.data["sweep"].iloc[0]
    explicit = df.assign(sweep="my-sweep")
    assert set(data.validate_sweeps(explicit).data["sweep"]) == {"my-sweep"}


def test_growth_rule_flat_low_load_stretch_is_not_a_knee():
    # real closed-loop sweeps are flat (and noisy) at low N: N = 1..4 alone would
    # extrapolate a flat line; the sequential rule uses every lighter point
    n = np.array([1, 2, 4, 8, 16, 32, 64, 128.0])
    lat = 3.3 + 0.08 * n + np.array([0.1, -0.1, 0.05, 0.0, 0.1, -0.2, 0.3, 0.0])
    df = pd.DataFrame(
        dict(
            verifier="V",
            hardware="B200",
            prefill=190,
            decode=760,
            k=0,
            rps=n / lat,
            concurrency=n,
            latency=lat,
        )
    )
    assert data.validate_sweeps(df).excluded.empty
    df.loc[7, "latency"] = 1.5 * (3.3 + 0.08 * 128)  # above the line, under the growth factor 2
    assert data.validate_sweeps(df).excluded.empty
    df.loc[7, "latency"] = 60.0  # a real knee: 4x the line
    assert list(data.validate_sweeps(df).excluded.index) == [7]


def _closed_sd_sweep(alpha, n=(1, 2, 4, 8, 16, 32.0), **labels) -> pd.DataFrame:
    """A closed-loop SD sweep (k = 5) with one alpha per point (``alpha`` broadcast)."""
    n = np.asarray(n, dtype=float)
    lat = laws.closed_loop_latency(n, 3.0, 0.05)
    return pd.DataFrame(
        dict(
            verifier="V",
            hardware="B200",
            drafter="d",
            cell="c",
            prefill=200,
            decode=700,
            k=5,
            alpha=alpha,
            rps=n / lat,
            concurrency=n,
            latency=lat,
        )
        | labels
    )


def test_per_point_alpha_without_source_is_one_measured_sweep(recwarn):
    # a user's alpha derived per point from measured acceptance: differs in the 3rd decimal
    cells = [
        _closed_sd_sweep(0.731 + 0.001 * np.arange(6) * (-1) ** np.arange(6), cell=c)
        for c in ("a", "b")
    ]
    dense = _closed_sd_sweep(np.nan, k=0, drafter="none", cell="a")
    table = data.validate_sweeps(pd.concat([*cells, dense], ignore_index=True))
    sd = table.data[table.data["k"] > 0]
    assert (sd["alpha_source"] == "measured").all()
    assert sd.groupby("cell")["sweep"].nunique().to_dict() == {"a": 1, "b": 1}
    assert all("alpha=measured" in s for s in sd["sweep"])
    assert table.data["sweep"].nunique() == 3
    assert not [w for w in recwarn if "single load level" in str(w.message)]


def test_demo_alphas_and_forced_alphas_stay_separate_sweeps(recwarn):
    demo = pd.read_parquet(Path(__file__).resolve().parents[1] / "data/demo.parquet")
    for df in (demo, demo.drop(columns="alpha_source")):  # explicit "given", and inferred
        kept = data.validate_sweeps(df).data
        k3 = kept[(kept["k"] == 3) & (kept["verifier"] == "Llama-3.1-8B")]
        k3 = k3[k3["cell"] == "1024x1024"]
        assert sorted(k3["alpha"].unique()) == [0.6, 1.0]
        config = k3["sweep"].str.replace(r"\|(open|closed)$", "", regex=True)  # either loop
        assert config.groupby(k3["alpha"]).nunique().to_dict() == {0.6: 1, 1.0: 1}
        assert config.nunique() == 2
        assert set(kept["alpha_source"]) == {"given", "dense"}
    # forced alphas without alpha_source, each over >= 2 loads: separate sweeps
    forced = pd.concat(
        [_closed_sd_sweep(a, n=(1, 4, 16)) for a in (0.6, 0.8, 0.95)], ignore_index=True
    )
    kept = data.validate_sweeps(forced).data
    assert kept["sweep"].nunique() == 3
    assert (kept["alpha_source"] == "given").all()
    assert not [w for w in recwarn if "single load level" in str(w.message)]


def test_explicit_given_per_point_alpha_warns_of_one_row_configurations():
    alpha = 0.731 + 0.001 * np.arange(6)
    df = _closed_sd_sweep(alpha).assign(alpha_source="given")
    with pytest.warns(UserWarning, match="6 of 6 configurations have a single load level") as w:
        table = data.validate_sweeps(df)
    assert len([x for x in w if "single load level" in str(x.message)]) == 1
    message = str(w[0].message)
    assert "C1, C2 cannot be separated" in message and "rest on the prior" in message
    assert "and 3 more" in message and "k=5|alpha=0.731;" in message
    assert "set it to 'measured'" in message
    assert table.data["sweep"].nunique() == 6
    assert (table.data["alpha_source"] == "given").all()
    # the same rows marked measured by the user form one sweep, without a warning
    measured = df.assign(alpha_source="measured")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert data.validate_sweeps(measured).data["sweep"].nunique() == 1


def test_alphas_far_apart_are_settings_even_at_one_load_each():
    """Alphas more than MEASURED_ALPHA_SPREAD apart, each at its own single load, are separate
    settings (one-row configurations, with the warning), not one measured sweep."""
    rows = [_closed_sd_sweep(a, n=(n,)) for a, n in ((0.6, 2.0), (0.8, 8.0), (0.95, 32.0))]
    with pytest.warns(UserWarning, match="3 of 3 configurations have a single load level"):
        kept = data.validate_sweeps(pd.concat(rows, ignore_index=True)).data
    assert kept["sweep"].nunique() == 3 and (kept["alpha_source"] == "given").all()
    # the same loads with alphas within the spread: one measured sweep
    close = [_closed_sd_sweep(a, n=(n,)) for a, n in ((0.73, 2.0), (0.74, 8.0), (0.72, 32.0))]
    kept = data.validate_sweeps(pd.concat(close, ignore_index=True)).data
    assert kept["sweep"].nunique() == 1 and (kept["alpha_source"] == "measured").all()
