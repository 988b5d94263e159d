"""Markdown tables of the report, and its sections on the data and the sampler.

:func:`markdown_table` writes a GitHub-flavoured markdown table (no extra dependency; the
benchmarks use it too). :func:`excluded_table` groups the points left out of a fit by the rule
that left them out (:mod:`specbayes.data`), and the ``summary.md`` sections built from the
fit's data and sampler rather than its decisions live here beside it: the points left out of
the fit and the sampler's health (R-hat, ESS, divergences).

Notes
-----
Split from :mod:`specbayes.report`, which re-exports :func:`markdown_table` and
:func:`excluded_table` and writes these sections into ``summary.md``; this module does not
import it back.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["excluded_table", "markdown_table"]


def markdown_table(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """A GitHub-flavoured markdown table (no extra dependency)."""

    def cell(v: Any) -> str:
        if isinstance(v, float | np.floating):
            return "–" if np.isnan(v) else format(v, floatfmt)
        return str(v)

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def excluded_table(excluded: pd.DataFrame, max_reason: int = 120) -> pd.DataFrame:
    """Rows left out of a fit, grouped by rule: ``rule, rows, example point, reason``.

    The rule is the short name (``rule`` column: ``flagged``, ``preempted``,
    ``rate_shortfall``, ``latency_growth``, ``duplicate``, joined by ``+``; else ``reason``);
    the example is one row's configuration and load, with its reason (cut at a word
    boundary past ``max_reason`` characters; every reason is in the fit's ``excluded``).
    """
    key = "rule" if "rule" in excluded and excluded["rule"].astype(str).ne("").all() else "reason"
    out = []
    for rule, rows in excluded.groupby(excluded[key].astype(str), sort=False):
        first = rows.iloc[0]
        where = ", ".join(
            str(first[c])
            for c in ("verifier", "drafter", "hardware", "cell")
            if c in rows and pd.notna(first[c]) and str(first[c]) not in ("", "none")
        )
        reason = str(first.get("reason", rule))
        if len(reason) > max_reason:
            reason = reason[:max_reason].rsplit(" ", 1)[0].rstrip(",;:") + " …"
        out.append(
            {
                "rule": rule.replace("+", " + "),
                "rows": len(rows),
                "example point": f"{where}{_load_text(first)}".strip(", "),
                "reason": reason,
            }
        )
    table = pd.DataFrame(out, columns=["rule", "rows", "example point", "reason"])
    return table.sort_values("rows", ascending=False, kind="stable").reset_index(drop=True)


def _load_text(row: pd.Series) -> str:
    conc = row.get("concurrency")
    if conc is not None and pd.notna(conc):
        return f" at N = {conc:g}"
    rps = row.get("rps")
    return f" at {rps:.3g} req/s" if rps is not None and pd.notna(rps) else ""


_RULES = {
    "flagged": "the benchmark tool, ingester or simulator marked the point saturated",
    "preempted": "KV-cache preemptions during the window (not the steady state)",
    "rate_shortfall": "open loop: achieved rate below 90 % of the offered rate",
    "latency_growth": "latency more than twice the unsaturated law fitted to lighter loads",
    "duplicate": "a repeated measurement of the same point",
}


def _excluded_section(excluded: pd.DataFrame | None) -> list[str]:
    if excluded is None or not len(excluded):
        return ["No measured point was left out of the fit.", ""]
    table = excluded_table(excluded)
    used = [r for r in _RULES if any(r in str(x) for x in table["rule"])]
    return [
        "## Points left out of the fit",
        "",
        f"{len(excluded)} measured points were left out of the fit, by rule "
        "(`specbayes.data` documents the rules):",
        "",
        markdown_table(table),
        "",
        *[f"- `{r}`: {_RULES[r]}." for r in used],
        "",
        "Every row is listed with its full reason in the fit: `load_fit(path).excluded` "
        "(a DataFrame) or the `excluded_data` group of the netCDF file "
        "(`arviz.from_netcdf(path).excluded_data`).",
        "",
    ]


def _health_section(fit: Any) -> list[str]:
    diag = getattr(fit, "diagnostics", None)
    if not callable(diag):
        return []
    try:
        d = diag()
    except Exception as exc:  # a report must still be written
        return [f"(diagnostics unavailable: {exc})", ""]
    per_var = d.groupby("variable", sort=False).agg(
        elements=("r_hat", "size"),
        max_r_hat=("r_hat", "max"),
        min_ess_bulk=("ess_bulk", "min"),
        min_ess_tail=("ess_tail", "min"),
    )
    table = per_var.reset_index().rename(
        columns=dict(
            variable="variable",
            elements="elements",
            max_r_hat="max R-hat",
            min_ess_bulk="min bulk ESS",
            min_ess_tail="min tail ESS",
        )
    )
    for col in ("min bulk ESS", "min tail ESS"):
        table[col] = [f"{v:,.0f}" if np.isfinite(v) else "–" for v in table[col]]
    table["max R-hat"] = [f"{v:.3f}" if np.isfinite(v) else "–" for v in table["max R-hat"]]
    divergences = int(d["divergences"].iloc[0]) if "divergences" in d else 0
    healthy = divergences == 0 and d.r_hat.max() <= 1.01 and d.ess_bulk.min() >= 400
    return [
        "## Sampler health",
        "",
        f"**{'Healthy' if healthy else 'NOT healthy — do not trust the answers above'}**: "
        f"{divergences} divergent transitions; worst R-hat {d.r_hat.max():.3f}, lowest bulk "
        f"ESS {d.ess_bulk.min():,.0f} (thresholds: 0, ≤ 1.01, ≥ 400).",
        "",
        markdown_table(table),
        "",
    ]
