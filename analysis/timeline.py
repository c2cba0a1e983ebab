"""Every request against time, and the engine's queue and cache beneath it: the timeline chart.

Pure: records, the stalls found in them (analysis.stalls) and the engine's readings
(engine_series.jsonl) in; one Altair chart out (None when there is nothing to draw), which gives
both timeline.png and the interactive chart of report.html (hover a bar for the request's figures).

- Periods: the run is cut into the stretches that ran together: a phase (a burst phase: each round;
  a capacity step: its settling and its window together), and phases whose spans overlap by half
  the shorter or more (a paste run's chats and pastes) drawn as one. Warm-ups join the period they
  ran in. At most MAX_PANELS periods are drawn (those with the most stall time, then the most
  requests), in time order; the title says how many of how many.
- Lanes: one per user, grouped by laptop (client_host): a user sends one request at a time, so each
  request is its own bar on its user's lane, from send to first token (waiting and prefill) and on
  to its end (decode); failed requests in their own colour; each kept stall marked on it. At most
  MAX_LANES lanes and about MAX_BARS requests per period: beyond, users are sampled evenly (one in
  k of the lanes in laptop order), and a few users with more requests than that show their first
  MAX_BARS in time; the period's title says so.
- Beneath each period, on the same time axis: the engine's requests running and waiting, and its KV
  cache in use (%), as read every second (the gauges the engine serves).

Time is seconds since the run's first request, on the clock the stalls are found on
(analysis.stalls.common_clock); the engine's readings are placed on it by their own perf_counter
when they were read by the process whose clock that is, else by their wall time.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from analysis.records import ok_mask
from analysis.stalls import MASTER_CLOCK, PERF_CLOCK, common_clock
from bench_tasks.formatting import MISSING

MAX_PANELS = 4
MAX_LANES = 30
MAX_BARS = 1000
MAX_POINTS = 600  # engine readings per period (peaks kept: the max of each bin)
MERGE_SHARE = 0.5
LANE_PX, FEW_LANES_PX, WIDTH_PX, ENGINE_PX = 12, 22, 900, 90  # a few lanes are drawn wider
PARTS = ["waiting + prefill", "decode", "failed", "stall"]
PART_COLORS = ["#f2b447", "#4c78a8", "#d62728", "#111111"]
SERIES_COLORS = ["#1b9e77", "#d95f02", "#7570b3"]  # running, waiting, KV cache %
SERIES = {"requests_running": "running", "requests_waiting": "waiting", "kv_cache_usage": "KV cache %"}
REQUEST_FIGURES = ["phase", "user", "client_host", "request_id", "ttft_s", "ttfo_s", "slot_wait_s", "rtt_s", "e2e_s",
                   "decode_tps", "prompt_tokens", "completion_tokens", "stall_count", "stall_s", "error"]


def _number(frame: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(frame[column], errors="coerce").astype(float)


def requests_on_clock(records: pd.DataFrame) -> tuple[pd.DataFrame, str, float]:
    """Each request's send, first token and end on the common clock, as seconds since the run's first
    send; the clock's name and its origin."""
    sent, clock = common_clock(records)
    origin = float(sent.min())
    start = sent - origin
    ttft, e2e = _number(records, "ttft_s"), _number(records, "e2e_s")
    end = start + e2e.fillna(ttft).fillna(0.0)
    frame = records.assign(start_s=start, first_s=start + ttft, end_s=end)
    return frame[start.notna()], clock, origin


def periods(requests: pd.DataFrame) -> pd.Series:
    """Each request's period label (see the module's notes)."""
    scenario, phase = requests["scenario"].astype(str), requests["phase"].astype(str)
    key = phase.where(scenario != "classroom", phase.str.replace(r"^settle-", "class-", regex=True))
    rounds = requests["round"].astype("Int64").astype(str)
    by_round = (scenario == "burst") | phase.str.startswith("probe-burst")
    key = key.where(~by_round, phase + " round " + rounds)
    warm = scenario == "warmup"
    spans = requests[~warm].assign(key=key[~warm]).groupby("key", sort=False).agg(
        start=("start_s", "min"), end=("end_s", "max")).sort_values("start")
    label, names, span = {}, [], None
    for name, start, end in zip(spans.index, spans["start"].to_numpy(), spans["end"].to_numpy()):
        if span is not None and _overlap(span, (start, end)) >= MERGE_SHARE:
            names.append(name)
            span = (span[0], max(span[1], end))
        else:
            label.update(dict.fromkeys(names, _name(names)))
            names, span = [name], (start, end)
    label.update(dict.fromkeys(names, _name(names)))
    found = key.map(label)
    if warm.any() and len(spans):
        found[warm] = _warm_periods(requests.loc[warm, "start_s"], spans.assign(label=spans.index.map(label)))
    return found.fillna("warm-ups")


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    shorter = min(a[1] - a[0], b[1] - b[0])
    shared = min(a[1], b[1]) - max(a[0], b[0])
    return 1.0 if shorter <= 0 and shared >= 0 else shared / shorter if shorter > 0 else 0.0


def _name(keys: list[str]) -> str:
    return " + ".join(keys[:3]) + (f" + {len(keys) - 3} more" if len(keys) > 3 else "")


def _warm_periods(sent: pd.Series, spans: pd.DataFrame) -> pd.Series:
    """A warm-up belongs to the period it ran in, else the next one to start (its users' first work)."""
    starts, ends, labels = spans["start"].to_numpy(), spans["end"].to_numpy(), spans["label"].to_numpy()
    t = sent.to_numpy()
    before = np.searchsorted(starts, t, side="right") - 1  # the last period to start by then
    inside = (before >= 0) & (t <= ends[np.maximum(before, 0)])
    chosen = np.where(inside, before, np.minimum(before + 1, len(starts) - 1))
    return pd.Series(labels[chosen], index=sent.index)


def engine_on_clock(series: pd.DataFrame, records: pd.DataFrame, clock: str, origin: float) -> pd.DataFrame:
    """The engine's readings at seconds since the run's first send, long form (t_s, series, value)."""
    if series.empty:
        return pd.DataFrame(columns=["t_s", "series", "value"])
    own = (clock == PERF_CLOCK and (series["runner"] == "local").all()) or \
        (clock == MASTER_CLOCK and (series["runner"] == "master").all())
    if own:
        t = series["t"] - origin
    else:  # through wall time: the records' own wall-to-clock offset places the readings
        sent, _clock = common_clock(records)
        wall_minus_clock = float((_number(records, "t_start") - sent).median())
        t = series["t_wall"] - wall_minus_clock - origin
    wide = series.assign(t_s=t, kv_cache_usage=series["kv_cache_usage"] * 100)
    present = [c for c in SERIES if wide[c].notna().any()]
    long = wide.melt(id_vars="t_s", value_vars=present, var_name="series", value_name="value").dropna()
    return long.assign(series=long["series"].map(SERIES))


def timeline_chart(records: pd.DataFrame, found: pd.DataFrame, series: pd.DataFrame) -> alt.VConcatChart | None:
    """The timeline (see the module's notes); ``found``: analysis.stalls.stalls(records)."""
    if records.empty:
        return None
    requests, clock, origin = requests_on_clock(records)
    if requests.empty:
        return None
    requests = requests.assign(period=periods(requests))
    engine = engine_on_clock(series, records, clock, origin)
    chosen = _chosen_periods(requests, found)
    panels = [_panel(requests[requests["period"] == name], found, engine, name) for name in chosen]
    total = requests["period"].nunique()
    title = "Every request against time" + (f" ({len(chosen)} of {total} periods shown: those with the most "
                                            "stall time)" if len(chosen) < total else "")
    return alt.vconcat(*panels, title=title).resolve_scale(x="independent", color="shared")


def _series_scale(engine: pd.DataFrame) -> alt.Scale:
    """The same colour for a series in every run; the legend lists only the series the engine gave
    (llama.cpp serves no KV cache gauge: no "KV cache %" without a line)."""
    given = set(engine["series"])
    pairs = [(name, color) for name, color in zip(SERIES.values(), SERIES_COLORS) if name in given]
    return alt.Scale(domain=[name for name, _ in pairs], range=[color for _, color in pairs])


def _chosen_periods(requests: pd.DataFrame, found: pd.DataFrame) -> list[str]:
    ids = requests["request_id"].astype(str)
    stalled = found.groupby("request_id")["stall_s"].sum() if len(found) else pd.Series(dtype=float)
    weight = requests.assign(stall=ids.map(stalled).fillna(0.0)).groupby("period").agg(
        stall=("stall", "sum"), n=("period", "size"), first=("start_s", "min"))
    top = weight.sort_values(["stall", "n"], ascending=False).head(MAX_PANELS)
    return list(top.sort_values("first").index)


def _panel(requests: pd.DataFrame, found: pd.DataFrame, engine: pd.DataFrame, name: str) -> alt.VConcatChart:
    requests = requests.assign(lane=_lane_names(requests))
    lanes, sampled = _lanes(requests)
    shown = requests[requests["lane"].isin(lanes)].sort_values("start_s")
    cut = len(shown) > MAX_BARS  # a few users with very many requests: the first MAX_BARS of them in time
    of = len(shown)
    shown = shown.head(MAX_BARS)
    t0, t1 = float(shown["start_s"].min()), float(shown["end_s"].max())
    domain = [t0, t1 if t1 > t0 else t0 + 1.0]
    x = alt.X("from_s:Q", title="seconds since the run's first request", scale=alt.Scale(domain=domain))
    color = alt.Color("part:N", scale=alt.Scale(domain=PARTS, range=PART_COLORS), title="")
    segments = _segments(shown)
    tooltip = [alt.Tooltip("part:N", title="part")] + [alt.Tooltip(f"{c}:N", title=c) for c in REQUEST_FIGURES]
    y = alt.Y("lane:N", sort=lanes, title=None, axis=alt.Axis(labelLimit=260))
    bars = alt.Chart(segments).mark_bar(stroke="white", strokeWidth=0.5).encode(x=x, x2="to_s:Q", y=y, color=color, tooltip=tooltip)
    layers = [bars]
    marks = _stall_marks(shown, found)
    if len(marks):
        layers.append(alt.Chart(marks).mark_bar(height={"band": 0.45}).encode(
            x=x, x2="to_s:Q", y=y, color=color,
            tooltip=[alt.Tooltip("part:N", title="part"), alt.Tooltip("lane:N", title="user"),
                     alt.Tooltip("stall_s:N", title="stall s"), alt.Tooltip("after_send_s:N", title="s after send"),
                     alt.Tooltip("cause:N", title="cause")]))
    subtitle = f"{len(lanes)} of {sampled} users shown (one in {-(-sampled // len(lanes))}, in laptop order)" \
        if len(lanes) < sampled else f"{len(lanes)} users"
    counted = f"the first {len(shown)} of their {of} requests, to {domain[1]:.0f} s" if cut else _counted(shown)
    lanes_chart = alt.layer(*layers).properties(
        title=alt.Title(f"{name}", subtitle=f"{subtitle}; {counted}"),
        width=WIDTH_PX, height=(FEW_LANES_PX if len(lanes) <= 10 else LANE_PX) * len(lanes))
    readings = _binned(engine[(engine["t_s"] >= domain[0] - 1) & (engine["t_s"] <= domain[1] + 1)])
    if readings.empty:
        return alt.vconcat(lanes_chart)
    line = alt.Chart(readings).mark_line(interpolate="step-after", point=False).encode(
        x=alt.X("t_s:Q", title="seconds since the run's first request", scale=alt.Scale(domain=domain)),
        y=alt.Y("value:Q", title="engine"), color=alt.Color("series:N", title="engine", scale=_series_scale(engine)),
        tooltip=[alt.Tooltip("series:N"), alt.Tooltip("t_s:Q", format=".1f", title="s"),
                 alt.Tooltip("value:Q", format=".3~f")])
    counts = line.transform_filter(alt.FieldOneOfPredicate(field="series", oneOf=["running", "waiting"]))
    cache = line.transform_filter(alt.datum.series == "KV cache %").encode(
        y=alt.Y("value:Q", title="KV cache %"))
    has_cache = (readings["series"] == "KV cache %").any()
    engine_chart = (alt.layer(counts, cache).resolve_scale(y="independent") if has_cache else counts).properties(
        width=WIDTH_PX, height=ENGINE_PX, title=alt.Title("the engine: requests running and waiting" +
                                                          (", KV cache in use" if has_cache else ""), fontSize=11))
    return alt.vconcat(lanes_chart, engine_chart).resolve_scale(x="shared", color="independent")


def _counted(shown: pd.DataFrame) -> str:
    """The period's requests, its warm-ups apart: the run's request counts leave them out."""
    warm = int((shown["scenario"] == "warmup").sum())
    return f"{len(shown) - warm} requests" + (f" and {warm} warm-up{'s' if warm > 1 else ''}" if warm else "")


def _lane_names(requests: pd.DataFrame) -> pd.Series:
    pid = requests["client_pid"].astype("Int64")
    return requests["client_host"].astype(str) + " · " + requests["user"].astype(str) + \
        (" (" + pid.astype(str) + ")").where(pid.notna(), "")


def _lanes(requests: pd.DataFrame) -> tuple[list[str], int]:
    """The lanes drawn (laptop, then first send), and how many there were before sampling."""
    first = requests.groupby("lane").agg(host=("client_host", "first"), t=("start_s", "min"))
    ordered = list(first.sort_values(["host", "t"]).index)
    per_lane = len(requests) / max(len(ordered), 1)
    limit = max(1, min(MAX_LANES, int(MAX_BARS // max(per_lane, 1.0))))
    if len(ordered) <= limit:
        return ordered, len(ordered)
    step = -(-len(ordered) // limit)
    return ordered[::step], len(ordered)


def _segments(requests: pd.DataFrame) -> pd.DataFrame:
    """Each request's bars: send to first token, first token to end; a failed request, send to end."""
    ok = ok_mask(requests)
    has_first = requests["first_s"].notna() & ok
    figures = requests[["lane"]].assign(**{c: requests[c].map(_text) for c in REQUEST_FIGURES})
    parts = [("waiting + prefill", has_first, "start_s", "first_s"), ("decode", has_first, "first_s", "end_s"),
             ("failed", ~ok, "start_s", "end_s"), ("decode", ok & ~has_first, "start_s", "end_s")]
    return pd.concat([figures[mask].assign(part=part, from_s=requests.loc[mask, start].to_numpy(),
                                           to_s=requests.loc[mask, end].to_numpy())
                      for part, mask, start, end in parts], ignore_index=True)


def _stall_marks(requests: pd.DataFrame, found: pd.DataFrame) -> pd.DataFrame:
    if found.empty:
        return found
    ids = requests.set_index(requests["request_id"].astype(str))
    ids = ids[(ids.index != "") & ~ids.index.duplicated()]
    mine = found[found["request_id"].astype(str).isin(ids.index)]
    if mine.empty:
        return mine
    start = ids.loc[mine["request_id"].astype(str), "start_s"].to_numpy() + mine["stall_start_s"].to_numpy()
    lane = ids.loc[mine["request_id"].astype(str), "lane"].to_numpy()
    cause = [f"{p} ({u}, {h})" if p else "no prompt was being read" for p, u, h in
             zip(mine["cause_phase"], mine["cause_user"], mine["cause_client_host"])]
    return pd.DataFrame({"part": "stall", "lane": lane, "from_s": start, "to_s": start + mine["stall_s"].to_numpy(),
                         "stall_s": mine["stall_s"].map(lambda v: f"{v:.3f}").to_numpy(),
                         "after_send_s": mine["stall_start_s"].map(lambda v: f"{v:.3f}").to_numpy(), "cause": cause})


def _binned(readings: pd.DataFrame) -> pd.DataFrame:
    """At most MAX_POINTS readings per series: the max of each bin, so peaks of the queue stay."""
    if readings.empty:
        return readings
    per_series = readings.groupby("series")["t_s"].transform("size")
    k = int(-(-per_series.max() // MAX_POINTS))
    if k <= 1:
        return readings
    order = readings.groupby("series").cumcount() // k
    return readings.assign(bin=order).groupby(["series", "bin"], as_index=False).agg(t_s=("t_s", "first"),
                                                                                     value=("value", "max"))


def _text(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return MISSING
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
