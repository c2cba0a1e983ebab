"""A run's (or several setups') figures in one long frame, and the facts its header states.

Pure: records (and the engine's metric readings) in, DataFrames and dicts out.
"""

from __future__ import annotations

import time

import pandas as pd

from analysis import agreement, capacity, rates, stalls, study, traffic
from analysis.records import measured, succeeded
from analysis.spread import LONG_COLUMNS, long_frame
from bench_tasks.slo import Slo

TABLE_TITLES = {**study.TABLE_TITLES,
                "capacity": "Capacity search: each class size's judged window",
                "capacity_result": "Capacity: the largest class that met the SLO",
                "rates": "Open loop: each offered rate's window",
                "floods": "Open loop: the floods (N requests in flight)",
                "rates_result": "Open loop: saturation, and the highest rate that met the SLO",
                "reuse": "Reuse: what the requests were made to share (a trace's hash ids, a shared prefix), beside what the "
                          "engine served cached",
                "stalls": "Stalls per phase: the share of decode time lost to them",
                "engine_clock": "Agreement with the engine's own clock (per request, by phase)",
                "engine_metrics": "Agreement with the engine's Prometheus counters (per phase)"}


def summary(records: pd.DataFrame, metrics: pd.DataFrame | None = None, names: dict | None = None,
            setup: str = "", slo: Slo | None = None, overdue: dict[str, int] | None = None) -> pd.DataFrame:
    """The study's tables, the capacity search's (given the SLO it judged by and the answers each window
    was judged without), then the engine agreement tables where the engine gave timings or counters."""
    frames = [study.study(records), capacity.tables(records, slo, overdue), rates.tables(records, slo),
              traffic.tables(records), stalls.stall_table(records),
              agreement.engine_clock(records).pipe(agreement.engine_clock_table)]
    if metrics is not None and not metrics.empty:
        frames.append(agreement.metrics_agreement(records, metrics, names).pipe(agreement.metrics_table))
    long = pd.concat([f for f in frames if not f.empty] or [long_frame([])], ignore_index=True)
    return long.assign(setup=setup)[LONG_COLUMNS]


def setups(records: pd.DataFrame) -> list[str]:
    """Setup labels in the order their records come."""
    return list(pd.unique(records["setup"]))


def comparison(records: pd.DataFrame, metrics: dict[str, pd.DataFrame] | None = None,
               names: dict[str, dict] | None = None, slos: dict[str, Slo | None] | None = None,
               overdue: dict[str, dict] | None = None) -> pd.DataFrame:
    """summary() of each setup, stacked; ``metrics``, ``names``, ``slos`` and ``overdue`` map a setup label
    to its metric readings, to what its engine profile says those series are, to the SLO its capacity
    search judged by and to its windows' overdue answers."""
    frames = [summary(records[records["setup"] == label], (metrics or {}).get(label), (names or {}).get(label),
                      setup=label, slo=(slos or {}).get(label), overdue=(overdue or {}).get(label))
              for label in setups(records)]
    return pd.concat(frames, ignore_index=True) if frames else long_frame([])


def facts(records: pd.DataFrame, settings: dict | None = None, lost_hosts: list[str] = ()) -> dict:
    """What the header says: setup, model, engine, API, server, client hosts (those in ``lost_hosts``
    marked lost), when, the run's mark, requests, completeness."""
    settings = settings or {}
    counted = measured(records)
    ok = len(succeeded(counted))
    started = pd.to_numeric(records["t_start"], errors="coerce")
    started = started[started > 0]  # 0.0 is the Record's default: no time recorded
    when = settings.get("started") or (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started.min()))
                                       if len(started) else "")
    complete = bool(records["run_complete"].all()) if "run_complete" in records else True
    return {"setup": _joined(records["setup"]), "model": _joined(records["model"]),
            "engine": _joined(records["engine"]), "api": _joined(counted["api"]), "server": settings.get("host", ""),
            "client_hosts": ", ".join(f"{host} (lost)" if host in lost_hosts else host
                                      for host in _values(records["client_host"])),
            "when": when, "run_mark": _joined(counted["run_mark"]) + (
                " (repeated on purpose: meant to be served from the cache)"
                if counted["mark_repeated"].fillna(False).astype(bool).any() else ""),
            "requests_ok": ok, "requests_failed": len(counted) - ok, "complete": complete}


def _joined(values: pd.Series) -> str:
    return ", ".join(_values(values))


def _values(values: pd.Series) -> list[str]:
    """The distinct non-empty values, in the order they first come."""
    return [v for v in pd.unique(values.fillna("").astype(str)) if v]
