"""Charts as PNG bytes (matplotlib's Agg renderer, no pyplot state); None when there is nothing to draw.

Bars are medians; their error bars span min to max of the same figure.
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.records import measured, phase_order, succeeded


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _figure_rows(long: pd.DataFrame, table: str, metric: str) -> pd.DataFrame:
    return long[(long["table"] == table) & (long["metric"] == metric)]


def _error_bars(rows: pd.DataFrame) -> np.ndarray:
    """Distances from the median down to min and up to max (0 where unknown: no bar, not a claim)."""
    low = (rows["median"] - rows["min"]).fillna(0).clip(lower=0)
    high = (rows["max"] - rows["median"]).fillna(0).clip(lower=0)
    return np.vstack([low.to_numpy(float), high.to_numpy(float)])


def total_tps_chart(long: pd.DataFrame) -> bytes | None:
    """Total tok/s by concurrency (burst table), median over rounds with min–max error bars."""
    rows = _figure_rows(long, "burst", "total_tps")
    if rows["median"].notna().sum() == 0:
        return None
    figure = Figure(figsize=(6, 4))
    axes = figure.add_subplot()
    axes.bar(rows["row"], rows["median"].to_numpy(float), yerr=_error_bars(rows), capsize=4, color="tab:blue")
    axes.set(title="Total tok/s by concurrency (median over rounds, min–max)", xlabel="phase",
             ylabel="total_tps (tok/s)")
    return _png(figure)


def ttft_by_prompt_chart(long: pd.DataFrame) -> bytes | None:
    """First token time per fresh-prompt size, median over runs with min–max error bars."""
    rows = _figure_rows(long, "prompt", "ttft_s")
    if rows["median"].notna().sum() == 0:
        return None
    figure = Figure(figsize=(6, 4))
    axes = figure.add_subplot()
    axes.errorbar(rows["row"], rows["median"], yerr=_error_bars(rows), marker="o", capsize=4)
    axes.set(title="First token by prompt size (median over runs, min–max)", xlabel="phase",
             ylabel="ttft_s (s)", ylim=(0, None))
    return _png(figure)


def token_latency_chart(records: pd.DataFrame) -> bytes | None:
    """Per-token latency (itl_s, in ms) of each successful request, a box per phase."""
    ok = succeeded(measured(records))
    phases = [p for p in phase_order(ok) if ok.loc[ok["phase"] == p, "itl_s"].notna().any()]
    if not phases:
        return None
    data = [pd.to_numeric(ok.loc[ok["phase"] == p, "itl_s"], errors="coerce").dropna().to_numpy(float) * 1000
            for p in phases]
    figure = Figure(figsize=(max(6, len(phases) * 0.9), 4))
    axes = figure.add_subplot()
    axes.boxplot(data, tick_labels=phases)
    axes.set(title="Per-token latency per request (itl_s)", xlabel="phase", ylabel="itl_s (ms)")
    axes.tick_params(axis="x", labelrotation=45)
    return _png(figure)


def compare_chart(long: pd.DataFrame, setups: list[str]) -> bytes | None:
    """Total tok/s at each concurrency, one bar per setup, min–max error bars."""
    rows = _figure_rows(long, "burst", "total_tps")
    if rows["median"].notna().sum() == 0:
        return None
    phases = list(dict.fromkeys(rows["row"]))
    width = 0.8 / max(len(setups), 1)
    figure = Figure(figsize=(max(6, len(phases) * len(setups) * 0.6), 4))
    axes = figure.add_subplot()
    for i, setup in enumerate(setups):
        mine = rows[rows["setup"] == setup].set_index("row").reindex(phases)
        positions = np.arange(len(phases)) + (i - (len(setups) - 1) / 2) * width
        axes.bar(positions, mine["median"].to_numpy(float), width, yerr=_error_bars(mine), capsize=3, label=setup)
    axes.set_xticks(np.arange(len(phases)), phases)
    axes.set(title="Total tok/s by concurrency (median over rounds, min–max)", xlabel="phase",
             ylabel="total_tps (tok/s)")
    axes.legend()
    return _png(figure)
