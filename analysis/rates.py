"""An open loop's records per offered rate: what was offered, what came back, how long it took, goodput.

A rate's requests carry their due time (``t_due``) and are labelled by their step's part
(``bench_tasks.open_loop``): ``settle-rate-R``, the window ``rate-R``, ``drain-rate-R``. Per window
(one row; a trace replayed at its own times is a window too: any phase whose records carry ``t_due``,
not a settle or drain), times on one clock (each machine's ``perf_counter`` plus its ``clock_offset_s``):

- ``span_s``: from the window's first due time to its last; ``requests``: the window's requests (a
  request never sent, error ``not_sent``, included); ``offered_rps``: the rate asked for; ``due_rps``:
  the rate the schedule drew, (requests - 1) / span_s;
- ``sent_rps``: requests of the rate (any part) sent within the span, per second; ``achieved_rps``:
  answers (successful) of the rate that ended within the span, per second; ``output_tps``: their
  completion tokens per second; ``goodput_rps``: those of them that met every goal of the SLO;
- ``goodput_share``: the share of the window's requests that met every goal (``meets``);
- ``ttft_due``, ``itl``, ``e2e_due`` at p50, p95 and p99 over the window's successful requests, each with
  its 90% interval (``slo.interval``: batch means on the requests in the order they were due, as a
  capacity step's: neighbours share the server's busy periods), ``send_lag`` p50 and p99, ``late`` (sent
  more than ``open_loop.LATE_S`` after due), ``not_sent``, ``decode_tps_p50`` (what one user reads at);
- ``saturated``: 1 when the open loop did not follow. The requests of the rate outstanding (due, not
  answered successfully yet) are counted at each due time of the window and a line fitted to them: a
  server that keeps up holds them about their mean (Little's law: the rate times the time from due to
  answer), one that does not sees them grow at the offered rate minus the answered one. The window did
  not follow when the line rises over the span by more than three times the count's swings about it
  (their standard deviation, times sqrt 2: the difference of two ends), plus 2% of the window's
  requests, and at least one request. The 2% is the resolution (a rate within 2% of saturation may pass
  as followed); near saturation the count swings slowly, and a short window may see it grow by chance or
  miss a slow growth.
- with an SLO, ``meets_slo``: ``slo.judge`` on the window's requests with their figures timed from due
  (a goal on ``ttft`` reads ``ttft_due_s``, on ``e2e`` ``e2e_due_s``, on ``ttfb`` ``send_lag_s +
  ttfb_s``), decided on its point estimates when its intervals straddle a limit, as a capacity step's
  last window; a saturated rate does not meet it (its waits grow as long as it lasts).

A request meets the SLO (for goodput) when it succeeded and each figure a goal names, timed from due,
is within the goal's limit: ``ttft_p95=1.0`` asks each request for a first token within 1 s of when it
was due, as vLLM's ``--goodput ttft:1000`` does, and DistServe counts a request only if it met every
goal. The floods (``flood-N``: N requests kept in flight) give the saturation rate: answers per second
after a first round (``bench_tasks.sweep``). Pure: records in, DataFrames and sentences out.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis import traffic
from analysis.records import as_rows, measured, ok_mask
from analysis.spread import NAN, long_frame, long_rows, single
from bench_tasks import slo as slos
from bench_tasks.capacity.policy import conclude
from bench_tasks.errors import NOT_SENT
from bench_tasks.figures import number
from bench_tasks.formatting import MISSING, percent, shown
from bench_tasks.open_loop import DRAIN, LATE_S, SETTLE
from bench_tasks.statistics import quantile
from bench_tasks.sweep import PLATEAU_GAIN

QUANTILES = (0.5, 0.95, 0.99)
LATENCIES = (("ttft_due", "ttft_due_s"), ("itl", "itl_s"), ("e2e_due", "e2e_due_s"))
Z_BOUNDARY = 3.0  # how many of the boundaries' spreads a shortfall may be before the rate did not follow
SHORTFALL_SHARE = 0.02  # and how much beyond them, as a share of the due requests
BEHIND_SHARE = 0.99  # a window sent less than this share of the rate it offered fell behind
LATE_SHARE = 0.01  # more than this share sent late (send lag p99 over LATE_S) fell behind
STEP_COLUMNS = ["phase", "offered_rps", "span_s", "requests", "sent", "ok", "failed", "not_sent", "late",
                "due_rps", "sent_rps", "achieved_rps", "output_tps", "goodput_rps", "goodput_share", "saturated",
                "decode_tps_p50", "send_lag_p50_s", "send_lag_p99_s"]
TEXT_COLUMNS = ("phase", "outcome", "missed")
FLOOD_COLUMNS = ["phase", "in_flight", "requests", "ok", "answers_rps"]
JUDGED = ("scenario", "ok", "flags", "t_start", "t_send", "send_lag_s", "ttfb_s", "ttft_due_s", "e2e_due_s",
          *(column for column, _at_most in slos.GOAL_COLUMNS.values()))  # what goodput and the verdict read


def latency_name(figure: str, q: float) -> str:
    """``ttft_due_p95_s``, ``itl_p50_s``."""
    return f"{figure}_p{q * 100:g}_s"


def _on_master(frame: pd.DataFrame, column: str) -> pd.Series:
    """A perf_counter column on the master's clock (a local run's clock_offset_s is empty: 0)."""
    offset = pd.to_numeric(frame["clock_offset_s"], errors="coerce").fillna(0.0)
    return pd.to_numeric(frame[column], errors="coerce") + offset


def window_phases(records: pd.DataFrame) -> list[str]:
    """The open loop's measured windows, in the order they were due: phases whose records have a due
    time, but not a settle or a drain."""
    kept = measured(records)
    due = kept[pd.to_numeric(kept["t_due"], errors="coerce").notna()]
    due = due[~due["phase"].str.startswith((f"{SETTLE}-", f"{DRAIN}-"))]
    first = _on_master(due, "t_due").groupby(due["phase"]).min().sort_values()
    return list(first.index)


def due_row(row: dict) -> dict:
    """A record with the figures a goal reads timed from when it was due (goodput's and the verdict's)."""
    lag = number(row.get("send_lag_s"))
    ttfb = number(row.get("ttfb_s"))
    return {**row, "ttft_s": row.get("ttft_due_s"), "e2e_s": row.get("e2e_due_s"),
            "ttfb_s": None if lag is None or ttfb is None else lag + ttfb}


def steps(records: pd.DataFrame, slo: slos.Slo | None = None) -> pd.DataFrame:
    """One row per window (see the module's notes), in the order they were due."""
    kept = measured(records)
    rows = [_step(phase, kept, slo) for phase in window_phases(records)]
    columns = STEP_COLUMNS + [c for f, _c in LATENCIES for q in QUANTILES for c in _ends(latency_name(f, q))]
    if slo is not None:
        columns += ["meets_slo", "outcome", "missed"]
    return pd.DataFrame(rows, columns=columns)


def _step(phase: str, kept: pd.DataFrame, slo: slos.Slo | None) -> dict:
    window = kept[kept["phase"] == phase]
    rate = kept[kept["phase"].isin([phase, f"{SETTLE}-{phase}", f"{DRAIN}-{phase}"])]
    due = _on_master(window, "t_due").sort_values()
    window = window.loc[due.index]  # in the order they were due
    first, last = (due.iloc[0], due.iloc[-1]) if len(due) else (NAN, NAN)
    span = last - first
    ok_window = window[ok_mask(window)]
    ok_rate = rate[ok_mask(rate)]
    ended = _on_master(ok_rate, "t_send") + pd.to_numeric(ok_rate["e2e_s"], errors="coerce")
    answered = ok_rate[(ended >= first) & (ended <= last)]
    sends = _on_master(rate, "t_send")
    lag = pd.to_numeric(window["send_lag_s"], errors="coerce").dropna()
    per_s = (lambda count: count / span) if span > 0 else (lambda count: NAN)
    good = _meeting(answered, slo)
    offered = pd.to_numeric(window["offered_rps"], errors="coerce").dropna()
    row = {"phase": phase, "offered_rps": offered.iloc[0] if len(offered) else NAN, "span_s": span,
           "requests": len(window), "sent": int(pd.to_numeric(window["t_send"], errors="coerce").notna().sum()),
           "ok": len(ok_window), "not_sent": int((window["error"] == NOT_SENT).sum()),
           "late": int((lag > LATE_S).sum()), "due_rps": per_s(len(window) - 1),
           "sent_rps": per_s(int(((sends >= first) & (sends <= last)).sum())), "achieved_rps": per_s(len(answered)),
           "output_tps": per_s(pd.to_numeric(answered["completion_tokens"], errors="coerce").sum()),
           "goodput_rps": per_s(int(good.sum())) if slo is not None else NAN,
           "goodput_share": _meeting(window, slo).mean() if slo is not None and len(window) else NAN,
           "decode_tps_p50": _quantile(ok_window["decode_tps"], 0.5),
           "send_lag_p50_s": _quantile(lag, 0.5), "send_lag_p99_s": _quantile(lag, 0.99)}
    row["failed"] = row["sent"] - row["ok"]
    row["saturated"] = _saturated(rate, due)
    for figure, column in LATENCIES:
        values = pd.to_numeric(ok_window[column], errors="coerce").dropna().tolist()
        for q in QUANTILES:
            row |= _percentile(latency_name(figure, q), values, q)
    if slo is not None:
        row |= _verdict(slo, window, row["saturated"])
    return row


def _meeting(rows: pd.DataFrame, slo: slos.Slo | None) -> pd.Series:
    """Which requests met every goal, timed from due."""
    if slo is None or rows.empty:
        return pd.Series(False, index=rows.index, dtype=bool)
    return pd.Series([slos.meets(slo, due_row(row)) for row in as_rows(rows, JUDGED)], index=rows.index, dtype=bool)


def _saturated(rate: pd.DataFrame, due: pd.Series) -> float:
    """1.0 when the requests outstanding (due, not answered) grew over the window by more than their
    swings allow (the module's notes), 0.0 when not, missing with fewer than three requests due (or all
    due at once)."""
    if len(due) < 3 or not due.iloc[-1] > due.iloc[0]:
        return NAN
    ok = ok_mask(rate)
    due_all = np.sort(_on_master(rate, "t_due").dropna().to_numpy())
    ended = (_on_master(rate, "t_send") + pd.to_numeric(rate["e2e_s"], errors="coerce"))[ok]
    ended = np.sort(ended.dropna().to_numpy())
    t = due.to_numpy() - due.iloc[0]
    outstanding = np.searchsorted(due_all, due.to_numpy(), "right") - np.searchsorted(ended, due.to_numpy(), "right")
    slope, level = np.polyfit(t, outstanding, 1)
    swings = np.std(outstanding - (level + slope * t), ddof=2)
    allowance = Z_BOUNDARY * math.sqrt(2) * swings + SHORTFALL_SHARE * (len(due) - 1)
    return float(slope * t[-1] > max(allowance, 1.0))


def _quantile(series: pd.Series, q: float) -> float:
    values = sorted(pd.to_numeric(series, errors="coerce").dropna().tolist())
    return quantile(values, q) if values else NAN


def _ends(name: str) -> tuple[str, str, str, str]:
    """A percentile's columns: ``ttft_due_p95_s``, ``ttft_due_p95_low_s``, ``ttft_due_p95_high_s``,
    ``ttft_due_p95_level`` (as a capacity step's goal figures are named)."""
    stem = name[:-2]
    return name, f"{stem}_low_s", f"{stem}_high_s", f"{stem}_level"


def _percentile(name: str, values_in_order: list[float], q: float) -> dict:
    """The percentile and its interval's columns (an end the values cannot place is missing)."""
    found = slos.interval(values_in_order, q) if values_in_order else None
    value = quantile(sorted(values_in_order), q) if values_in_order else NAN
    _name, low, high, level = _ends(name)
    return {name: value, low: NAN if found is None or found.low is None else found.low,
            high: NAN if found is None or found.high is None else found.high,
            level: NAN if found is None else found.level}


def _verdict(slo: slos.Slo, window: pd.DataFrame, saturated: float) -> dict:
    judged = slos.judge(slo, [due_row(row) for row in as_rows(window, JUDGED)], final=True)
    outcome, missed = judged["outcome"], list(judged["missed"])
    if saturated == 1.0 and outcome == slos.MEETS:
        outcome, missed = slos.MISSES, ["the server did not follow the rate: its waits grow as long as it lasts"]
    meets = {slos.MEETS: 1.0, slos.MISSES: 0.0}.get(outcome, NAN)
    return {"meets_slo": meets, "outcome": outcome, "missed": "; ".join(missed)}


def floods(records: pd.DataFrame) -> pd.DataFrame:
    """One row per flood (``flood-N``): its requests, those that succeeded, and the answers per second
    after its first round (the first N to end), by Little's law as the sweep took it
    (``open_loop.Flood``): N over the mean ``e2e_s`` of the requests after the first round, times the
    share of them that succeeded."""
    kept = measured(records)
    rows = []
    for phase, group in kept[kept["phase"].str.fullmatch(r"flood-\d+")].groupby("phase", sort=False):
        in_flight = int(phase.rsplit("-", 1)[1])
        ends = (_on_master(group, "t_send") + pd.to_numeric(group["e2e_s"], errors="coerce")).sort_values()
        timed = group.loc[ends.index[in_flight:]]
        took = pd.to_numeric(timed["e2e_s"], errors="coerce").dropna()
        ok = ok_mask(timed)
        rate = in_flight / took.mean() * ok.mean() if len(took) and took.mean() > 0 else NAN
        rows.append({"phase": phase, "in_flight": in_flight, "requests": len(group),
                     "ok": int(ok_mask(group).sum()), "answers_rps": rate})
    return pd.DataFrame(rows, columns=FLOOD_COLUMNS).sort_values("in_flight", ignore_index=True)


def saturation(flooded: pd.DataFrame) -> tuple[float, bool]:
    """(the saturation rate: the floods' highest answers per second, or missing; whether the largest
    flood still gained ``PLATEAU_GAIN`` over the ones before it: then the server may answer more with
    more requests in flight than the client let it)."""
    rates = flooded["answers_rps"].dropna()
    if rates.empty:
        return NAN, False
    last, before = rates.iloc[-1], rates.iloc[:-1]
    return float(rates.max()), bool(before.empty or last >= before.max() * (1 + PLATEAU_GAIN))


def tables(records: pd.DataFrame, slo: slos.Slo | None = None) -> pd.DataFrame:
    """Tables ``rates`` (a row per window), ``floods`` (a row per flood) and ``rates_result`` (the
    saturation rate, the highest rate followed and, with an SLO, the highest that met it); empty for
    records without an open loop."""
    found, flooded = steps(records, slo), floods(records)
    if found.empty and flooded.empty:
        return long_frame([])
    rows = []
    for step in found.to_dict("records"):
        rows += long_rows("rates", step["phase"], _figures(step))
    for flood in flooded.to_dict("records"):
        rows += long_rows("floods", flood["phase"], {
            "in_flight": single(flood["in_flight"], flood["requests"]),
            "answers_rps": single(flood["answers_rps"], flood["ok"])})
    rows += long_rows("rates_result", "sweep", _result(found, flooded, slo))
    return long_frame(rows)


def _figures(step: dict) -> dict:
    counted = ("requests", "sent", "ok", "failed", "not_sent", "late", "goodput_share", "saturated", "due_rps")
    figures = {}
    for metric in [c for c in STEP_COLUMNS if c not in TEXT_COLUMNS] + (["meets_slo"] if "meets_slo" in step else []):
        figures[metric] = single(step[metric], step["requests"] if metric in counted else step["ok"])
    for figure, _column in LATENCIES:
        for q in QUANTILES:
            name, low, high, level = _ends(latency_name(figure, q))
            figures[name] = single(step[name], step["ok"])
            if not pd.isna(step[level]) and not pd.isna(step[name]):
                figures[name] |= {"ci_low": step[low], "ci_high": step[high], "ci_level": round(float(step[level]), 4),
                                  "ci_method": slos.METHOD}
    return figures


def _result(found: pd.DataFrame, flooded: pd.DataFrame, slo: slos.Slo | None) -> dict:
    rate, _climbing = saturation(flooded)
    followed = found[found["saturated"] == 0.0]["offered_rps"]
    result = {"saturation_rps": single(rate, len(flooded)),
              "followed_rps": single(followed.max() if len(followed) else NAN, len(found))}
    if slo is not None and len(found):
        met, _bound, _why = conclude(_verdicts(found))
        result["slo_rate_rps"] = single(met if met else NAN, len(found))
    return result


def _verdicts(found: pd.DataFrame) -> dict:
    """offered rate -> outcome (a window without an offered rate, a trace's, is left out)."""
    return {rate: outcome for rate, outcome in zip(found["offered_rps"], found["outcome"]) if not pd.isna(rate)}


def conclusion(records: pd.DataFrame, slo: slos.Slo | None) -> list[str]:
    """The open loop's result in a few sentences: the saturation rate, how far the server followed, and
    with an SLO the highest rate that met it (the last line); none without an open loop."""
    found, flooded = steps(records, slo), floods(records)
    lines = []
    rate, climbing = saturation(flooded)
    if not math.isnan(rate):
        best = flooded[flooded["answers_rps"] >= rate / (1 + PLATEAU_GAIN)].iloc[0]  # the fewest in flight to get there
        lines.append(f"Saturation rate: {rate:.3g} requests/s, answered with {best['in_flight']} in flight "
                     f"({best['phase']})" + (f"; the largest flood still gained {PLATEAU_GAIN:.0%} or more: the server "
                                              "may answer more with more requests in flight (raise --max-in-flight)."
                                              if climbing and len(flooded) > 1 else "."))
    if found.empty:
        return lines
    offered = found.dropna(subset=["offered_rps"])
    followed, behind = offered[offered["saturated"] == 0.0], offered[offered["saturated"] == 1.0]
    if len(offered):
        head = (f"The server followed every rate offered, up to {_rps(offered['offered_rps'].max())}" if behind.empty
                else f"The server did not follow {_rps(behind['offered_rps'].min())} (achieved "
                     f"{behind.iloc[0]['achieved_rps']:.3g} of {behind.iloc[0]['due_rps']:.3g} due)"
                     + (f"; it followed up to {_rps(followed['offered_rps'].max())}" if len(followed) else ""))
        lines.append(head + ".")
    if slo is not None and len(offered):
        met, bound, why = conclude(_verdicts(offered))
        text = f"Highest rate that met the SLO ({slo.text()}, each request timed from when it was due)"
        if not met:
            lines.append(f"{text}: none; {_rps(bound)} missed it ({_missed(offered, bound)}).")
        elif bound is None:
            lines.append(f"{text}: {_rps(met)}, the highest rate offered.")
        else:
            lines.append(f"{text}: {_rps(met)}; {_rps(bound)} missed it ({_missed(offered, bound)}).")
    return lines


def _rps(rate: float) -> str:
    return f"{rate:g} requests/s"


def _missed(found: pd.DataFrame, rate: float) -> str:
    step = found[found["offered_rps"] == rate].iloc[-1]
    return step["missed"] or step["outcome"]


def warnings(records: pd.DataFrame) -> list[str]:
    """A window whose sends fell behind its schedule: what reached the server was not the schedule (its
    figures timed from due still say what the one who asked waited); a --dataset read more than once
    (analysis.traffic.reread)."""
    notes = []
    for step in steps(records).to_dict("records"):
        problems = []
        if step["sent_rps"] < BEHIND_SHARE * step["due_rps"]:
            problems.append(f"sent {step['sent_rps']:.3g} requests/s of the {step['due_rps']:.3g} due")
        if step["late"] > LATE_SHARE * step["requests"]:
            problems.append(f"{step['late']} of {step['requests']} requests left more than {LATE_S * 1000:g} ms after "
                            f"they were due (send lag p99 {_ms(step['send_lag_p99_s'])})")
        if step["not_sent"]:
            problems.append(f"{step['not_sent']} were never sent (every user was busy: --max-in-flight)")
        if problems:
            notes.append(f"{step['phase']}: the client fell behind its schedule: " + "; ".join(problems) + ".")
    return notes + traffic.reread(records)


def _ms(seconds: float) -> str:
    return MISSING if pd.isna(seconds) else f"{shown(seconds * 1000, 1)} ms"


def format_steps(found: pd.DataFrame) -> str:
    """The windows as the terminal shows them after a sweep: one line per rate."""
    header = [("rate", 8), ("due/s", 8), ("achieved/s", 11), ("tok/s", 9), ("TTFT p50", 9), ("TTFT p95", 9),
              ("ITL p50", 9), ("ITL p95", 9), ("lag p99", 11), ("goodput", 8), ("followed", 9)]
    lines = ["".join(f"{name:>{width}}" for name, width in header)]
    for step in found.to_dict("records"):
        cells = [shown(step["offered_rps"], 2), shown(step["due_rps"], 2), shown(step["achieved_rps"], 2),
                 shown(step["output_tps"], 1), shown(step["ttft_due_p50_s"], 3), shown(step["ttft_due_p95_s"], 3),
                 shown(step["itl_p50_s"], 4), shown(step["itl_p95_s"], 4), _ms(step["send_lag_p99_s"]),
                 percent(step["goodput_share"]),
                 {0.0: "yes", 1.0: "no"}.get(step["saturated"], MISSING)]
        lines.append("".join(f"{cell:>{width}}" for cell, (_name, width) in zip(cells, header)))
    return "\n".join(lines)

