"""Charts as Altair (Vega-Lite) definitions; None when there is nothing to draw.

One definition per chart gives both renderings: ``png`` (vl-convert, no browser) for summary.md
and compare.md, and the interactive chart of report.html / compare.html (``document.to_html``
inlines Vega's own script, so hovering a mark shows its value offline). Every chart takes setups
by their short keys (``legend.setup_keys``): bars are medians, error bars span min to max, labels
and tooltips quote the figures as the tables do.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import vl_convert

from analysis.headline import SECOND_NAMES
from analysis.records import measured, phase_order, succeeded
from bench_tasks.formatting import brief, interval

BAR_PX = 48  # one bar's width: room for a label such as "0.0025" above it
WIDE_RATIO = 20  # values this many times apart get a log axis: on a linear one the small ones vanish
FIGURE_NAMES = {"total_tps": "total tok/s", **SECOND_NAMES}
VEGA_LITE_VERSION = "_".join(alt.SCHEMA_VERSION.split(".")[:2])  # the version Altair writes
SCRIPT_NAME = f"vega-embed-vl{VEGA_LITE_VERSION}-vlconvert{vl_convert.__version__}.js"  # what makes the script


def png(chart_or_spec: alt.TopLevelMixin | dict) -> bytes:
    """The chart as a PNG, from the chart or from its ``spec`` (the same bytes as ``chart.save``;
    from the spec, Altair does not build and validate it a second time)."""
    vl_spec = chart_or_spec if isinstance(chart_or_spec, dict) else spec(chart_or_spec)
    return vl_convert.vegalite_to_png(vl_spec=vl_spec, scale=1, vl_version=VEGA_LITE_VERSION)


def spec(chart: alt.TopLevelMixin) -> dict:
    """The chart's Vega-Lite specification, its data inlined."""
    return chart.to_dict()


def embed_script() -> str:
    """Vega, Vega-Lite and vega-embed in one script, of the Vega-Lite version Altair writes (offline)."""
    return vl_convert.javascript_bundle(vl_version=VEGA_LITE_VERSION)


def _figures(long: pd.DataFrame, keys: dict[str, str], table: str, metrics: list[str]) -> pd.DataFrame:
    """The long rows of ``table``/``metrics`` that have a median, with key, label and range text."""
    rows = long[(long["table"] == table) & long["metric"].isin(metrics) & long["setup"].isin(list(keys))
                & long["median"].notna()]
    return rows.assign(
        key=rows["setup"].map(keys), figure=rows["metric"].map(lambda m: FIGURE_NAMES.get(m, m)),
        value=[brief(v, m) for v, m in zip(rows["median"], rows["metric"])],
        range=[interval(lo, hi, lambda end, m=m: brief(end, m)) if pd.notna(lo) else "" for lo, hi, m in
               zip(rows["min"], rows["max"], rows["metric"])],
        top=rows[["median", "max"]].max(axis=1))


def _value_scale(values: pd.Series) -> tuple[alt.Scale, str]:
    """A log scale (and the words for the axis title) when positive values span more than WIDE_RATIO."""
    values = pd.to_numeric(values, errors="coerce").dropna()
    if len(values) and (values > 0).all() and values.max() / values.min() > WIDE_RATIO:
        return alt.Scale(type="log"), ", log scale"
    return alt.Scale(), ""


def _tooltip(group_title: str) -> list:
    return [alt.Tooltip("key:N", title="setup"), alt.Tooltip("setup:N", title="label"),
            alt.Tooltip("group:N", title=group_title), alt.Tooltip("figure:N", title="figure"),
            alt.Tooltip("value:N", title="median"), alt.Tooltip("range:N", title="min–max"),
            alt.Tooltip("n:Q", title="n")]


def _bars(frame: pd.DataFrame, groups: list[str], keys: list[str], title: str, unit: str) -> alt.LayerChart:
    """Grouped bars: one group per x value, one bar per setup, value labels, min–max rules."""
    base = alt.Chart(frame).encode(
        x=alt.X("group:N", sort=groups, title=None, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("key:N", sort=keys), tooltip=_tooltip("burst"))
    bars = base.mark_bar().encode(y=alt.Y("median:Q", title=unit),
                                  color=alt.Color("key:N", sort=keys, title="setup"))
    errors = base.mark_rule(color="black").encode(y="min:Q", y2="max:Q")
    labels = base.mark_text(baseline="bottom", dy=-3, fontSize=10).encode(y="top:Q", text="value:N")
    return alt.layer(bars, errors, labels).properties(
        title=title, width=max(160, BAR_PX * len(groups) * len(keys)), height=260)


def burst_chart(long: pd.DataFrame, keys: dict[str, str]) -> alt.HConcatChart | None:
    """Total tok/s by burst size ("4 at once"), a bar per setup; the slowest first token beside it."""
    frame = _figures(long, keys, "burst", ["total_tps", "ttft_p95_s"])
    if frame.empty:
        return None
    concurrency = frame["row"].str.removeprefix("burst-").astype(int)
    frame = frame.assign(group=concurrency.astype(str) + " at once", concurrency=concurrency)
    groups = list(dict.fromkeys(frame.sort_values("concurrency")["group"]))
    order = list(keys.values())
    panels = [_bars(frame[frame["metric"] == metric], groups, order, title, unit)
              for metric, title, unit in (
                  ("total_tps", "Total tok/s by concurrency", "total tok/s (median over rounds, min–max)"),
                  ("ttft_p95_s", "Slowest first token", "s (p95 of a round; median over rounds, min–max)"))
              if (frame["metric"] == metric).any()]
    return alt.hconcat(*panels).resolve_scale(color="shared")


def ttft_by_prompt_chart(long: pd.DataFrame, keys: dict[str, str]) -> alt.LayerChart | None:
    """First token by fresh-prompt size, a line per setup, min–max rules."""
    frame = _figures(long, keys, "prompt", ["ttft_s"])
    if frame.empty:
        return None
    tokens = frame["row"].map(lambda row: _tokens(long, row))
    frame = frame.assign(group=frame["row"].str.removeprefix("prompt-").str.upper(), tokens=tokens)
    groups = list(dict.fromkeys(frame.sort_values("tokens")["group"]))
    order = list(keys.values())
    base = alt.Chart(frame).encode(x=alt.X("group:N", sort=groups, title="fresh prompt size (tokens)",
                                           axis=alt.Axis(labelAngle=0)),
                                   color=alt.Color("key:N", sort=order, title="setup"),
                                   tooltip=_tooltip("prompt size"))
    scale, words = _value_scale(frame[["median", "min", "max"]].stack())
    lines = base.mark_line(point=alt.OverlayMarkDef(size=70)).encode(
        y=alt.Y("median:Q", title=f"first token s (median over runs, min–max{words})", scale=scale))
    errors = base.mark_rule().encode(y="min:Q", y2="max:Q")
    return alt.layer(lines, errors).properties(title="First token by fresh prompt size",
                                               width=max(240, 90 * len(groups)), height=260)


def _tokens(long: pd.DataFrame, row: str) -> float:
    """The prompt size a prompt row measured (its median prompt_tokens), for ordering the x axis."""
    hit = long[(long["table"] == "prompt") & (long["row"] == row) & (long["metric"] == "prompt_tokens")]
    return float(hit["median"].max()) if len(hit) else float("nan")


BOX_COLUMNS = ["phase", "setup", "key", "n", "min", "q1", "median", "q3", "max"]


def latency_boxes(records: pd.DataFrame, keys: dict[str, str]) -> pd.DataFrame:
    """Per phase and setup, the box of its successful requests' per-token latency (itl_s, in ms): n,
    min, first quartile, median, third quartile, max (quartiles interpolate linearly, as Vega's do).
    A few rows, whatever the number of requests: the chart is drawn from these, not from every request.
    Requests without itl_s are left out, never read as 0; a phase and setup with none has no box."""
    ok = succeeded(measured(records))
    ok = ok[ok["setup"].isin(list(keys))]
    itl_ms = pd.to_numeric(ok["itl_s"], errors="coerce").astype(float) * 1000
    frame = pd.DataFrame({"phase": ok["phase"], "setup": ok["setup"], "itl_ms": itl_ms}).dropna()
    if frame.empty:
        return pd.DataFrame(columns=BOX_COLUMNS)
    groups = frame.groupby(["phase", "setup"], sort=False)["itl_ms"]
    boxes = groups.agg(n="size", min="min", median="median", max="max")
    boxes["q1"], boxes["q3"] = groups.quantile(0.25), groups.quantile(0.75)
    boxes = boxes.reset_index()
    return boxes.assign(key=boxes["setup"].map(keys))[BOX_COLUMNS]


def token_latency_chart(records: pd.DataFrame, keys: dict[str, str]) -> alt.LayerChart | None:
    """Per-token latency (itl_s, in ms) of every successful request: a box per phase and setup (the
    quartiles), whiskers from min to max, drawn from ``latency_boxes``."""
    boxes = latency_boxes(records, keys)
    if boxes.empty:
        return None
    phases = [p for p in phase_order(succeeded(measured(records))) if p in set(boxes["phase"])]
    order = list(keys.values())
    scale, words = _value_scale(pd.concat([boxes["min"], boxes["max"]]))
    shown = boxes.assign(**{f"{c}_text": boxes[c].map(lambda v: f"{v:.2f}") for c in ("min", "q1", "median", "q3", "max")})
    base = alt.Chart(shown).encode(
        x=alt.X("phase:N", sort=phases, title="phase", axis=alt.Axis(labelAngle=-45)),
        xOffset=alt.XOffset("key:N", sort=order), color=alt.Color("key:N", sort=order, title="setup"),
        tooltip=[alt.Tooltip("key:N", title="setup"), alt.Tooltip("setup:N", title="label"),
                 alt.Tooltip("phase:N", title="phase"), alt.Tooltip("n:Q", title="requests"),
                 *[alt.Tooltip(f"{c}_text:N", title=f"{name} ms") for c, name in
                   (("max", "max"), ("q3", "q3"), ("median", "median"), ("q1", "q1"), ("min", "min"))]])
    y = alt.Y("min:Q", title=f"itl_s (ms) per request: quartiles, min–max{words}", scale=scale)
    whiskers = base.mark_rule().encode(y=y, y2="max:Q")
    box = base.mark_bar(opacity=0.85).encode(y="q1:Q", y2="q3:Q")
    # Dark, not Vega-Lite's white: a phase whose requests all had one itl_s has a box of no height, and a
    # white tick on the white page would leave it looking empty.
    median = base.mark_tick(thickness=2).encode(y="median:Q", color=alt.value("#222222"))
    return alt.layer(whiskers, box, median).properties(
        title="Per-token latency per request (itl_s)", width=max(240, 26 * len(phases) * len(order)), height=260)


CAPACITY_PANELS = (  # (panel title, y axis, unit, [(figure, what the line is)]) of the capacity chart
    ("First token by class size", "first token s", "s", [("ttft_p50_s", "TTFT p50"), ("ttft_p95_s", "TTFT p95")]),
    ("Decode tok/s one student sees", "decode tok/s per student", "tok/s",
     [("per_user_decode_tps", "decode p50")]))


def capacity_chart(long: pd.DataFrame, keys: dict[str, str], slos: dict) -> alt.HConcatChart | None:
    """The capacity search: TTFT p50 and p95, and per-user decode tok/s, against the number of students,
    a line per setup and figure; each SLO goal as a horizontal rule on its panel and each setup's
    capacity as a vertical one. ``slos`` maps a setup label to the SLO it was judged by."""
    steps = long[(long["table"] == "capacity") & long["setup"].isin(list(keys))]
    if steps.empty:
        return None
    capacity = _capacity_marks(long, keys)
    panels = [_capacity_panel(steps, keys, _goal_rules(slos, keys, unit), capacity, title, axis, lines)
              for title, axis, unit, lines in CAPACITY_PANELS]
    panels = [panel for panel in panels if panel is not None]
    return alt.hconcat(*panels).resolve_scale(color="shared", strokeDash="independent") if panels else None


def _capacity_panel(steps: pd.DataFrame, keys: dict[str, str], goals: pd.DataFrame, capacity: pd.DataFrame,
                    title: str, axis: str, lines: list[tuple[str, str]]) -> alt.LayerChart | None:
    names = {**dict(zip(goals["figure"], goals["figure"])), **dict(lines)}  # a goal's own figure by its name
    frame = _capacity_points(steps, keys, names)
    if frame.empty:
        return None
    order = list(keys.values())
    color = alt.Color("key:N", sort=order, title="setup")
    scale, words = _value_scale(pd.concat([frame["median"], goals["limit"]]))
    base = alt.Chart(frame).encode(
        x=alt.X("students:Q", title="students in the class", scale=alt.Scale(zero=False),
                axis=alt.Axis(tickMinStep=1, format="d")),
        y=alt.Y("median:Q", title=f"{axis}{words}", scale=scale), color=color,
        strokeDash=alt.StrokeDash("line:N", sort=list(names.values()), legend=None),  # each line is labelled
        tooltip=[alt.Tooltip("key:N", title="setup"), alt.Tooltip("setup:N", title="label"),
                 alt.Tooltip("students:Q", title="students"), alt.Tooltip("line:N", title="figure"),
                 alt.Tooltip("value:N", title="value"), alt.Tooltip("n:Q", title="n")])
    first = frame[frame["key"] == frame["key"].iloc[0]]  # dashes are the same for every setup: name them once
    starts = first.loc[first.groupby("line")["students"].idxmin()]  # where the lines are apart
    layers = [base.mark_line(point=alt.OverlayMarkDef(size=50)),
              alt.Chart(starts).mark_text(align="left", dx=4, dy=-9, fontSize=10).encode(
                  x="students:Q", y="median:Q", text="line:N", color=color)]
    if not goals.empty:
        rules = alt.Chart(goals).encode(y="limit:Q", tooltip=[alt.Tooltip("goal:N", title="SLO goal")])
        layers += [rules.mark_rule(strokeDash=[2, 2], color="firebrick"),
                   rules.mark_text(align="left", dx=4, dy=-6, fontSize=10, color="firebrick").encode(
                       x=alt.value(0), text="goal:N")]
    if not capacity.empty:
        marks = alt.Chart(capacity).encode(x="students:Q", color=color,
                                           tooltip=[alt.Tooltip("label:N", title="capacity")])
        layers += [marks.mark_rule(strokeWidth=2, opacity=0.6),
                   marks.mark_text(align="left", dx=3, baseline="top", fontSize=10).encode(
                       y=alt.Y("place:Q", scale=None), text="label:N")]
    return alt.layer(*layers).properties(title=title, width=320, height=260)


def _capacity_marks(long: pd.DataFrame, keys: dict[str, str]) -> pd.DataFrame:
    """Each setup's capacity: where its vertical rule goes, its label, and how far down the label sits."""
    rows = long[(long["table"] == "capacity_result") & (long["metric"] == "capacity_students")
                & long["setup"].isin(list(keys))]
    return rows.assign(key=rows["setup"].map(keys), students=rows["median"],
                       label=[f"{keys[s]}: capacity {v:.0f}" for s, v in zip(rows["setup"], rows["median"])],
                       place=[4 + 13 * list(keys).index(s) for s in rows["setup"]])  # one label under another


def _capacity_points(steps: pd.DataFrame, keys: dict[str, str], names: dict[str, str]) -> pd.DataFrame:
    """One point per setup, step and figure named in ``names`` that has a value (a saturated step's
    figures are missing: no point), at its class size."""
    students = steps[steps["metric"] == "students"].set_index(["setup", "row"])["median"]
    rows = steps[steps["metric"].isin(list(names)) & steps["median"].notna()]
    return rows.assign(key=rows["setup"].map(keys), line=rows["metric"].map(names),
                       students=[students.get((s, r)) for s, r in zip(rows["setup"], rows["row"])],
                       value=[brief(v, m) for v, m in zip(rows["median"], rows["metric"])])


def _goal_rules(slos: dict, keys: dict[str, str], unit: str) -> pd.DataFrame:
    """The SLO's first-token or decode goals measured in ``unit``, one horizontal rule each (setups
    that share a goal share its rule): figure, limit, and the goal in words with its setups."""
    shared: dict[tuple, list[str]] = {}
    for label, slo in slos.items():
        for goal in (slo.goals if slo is not None and label in keys else ()):
            if goal.unit == unit and goal.column in ("ttft_s", "decode_tps"):
                shared.setdefault((goal.figure, goal.limit, goal.text()), []).append(keys[label])
    rows = [{"figure": figure, "limit": limit, "goal": f"SLO {', '.join(setups)}: {text}"}
            for (figure, limit, text), setups in shared.items()]
    return pd.DataFrame(rows, columns=["figure", "limit", "goal"])


RATE_PANELS = (  # (panel title, y axis, [(figure, its line)]) of the latency-throughput chart
    ("First token against achieved rate", "first token s, timed from due",
     [("ttft_due_p50_s", "TTFT p50"), ("ttft_due_p95_s", "TTFT p95")]),
    ("Inter-token latency against achieved rate", "s per token", [("itl_p50_s", "ITL p50"), ("itl_p95_s", "ITL p95")]))


def _rate_points(long: pd.DataFrame, keys: dict[str, str]) -> pd.DataFrame:
    """The ``rates`` table wide: one row per setup and window, its figures as columns, in offered order."""
    rates = long[(long["table"] == "rates") & long["setup"].isin(list(keys))]
    if rates.empty:
        return pd.DataFrame()
    wide = rates.pivot_table(index=["setup", "row"], columns="metric", values="median", aggfunc="first",
                             dropna=False).reset_index()
    wide = wide.assign(key=wide["setup"].map(keys), rate=wide["row"].str.removeprefix("rate-"))
    return wide.sort_values(["key", "offered_rps", "row"], ignore_index=True)


def rate_latency_chart(long: pd.DataFrame, keys: dict[str, str]) -> alt.HConcatChart | None:
    """An open loop's latency against the rate it achieved: TTFT p50 (solid) and p95 (dashed) timed from
    due, and ITL p50 and p95, one line per setup and figure through its rates in offered order, each
    figure named beside its line's last point (the first setup's)."""
    wide = _rate_points(long, keys)
    if wide.empty or "achieved_rps" not in wide:
        return None
    panels = [panel for title, axis, lines in RATE_PANELS
              if (panel := _rate_panel(wide, keys, title, axis, lines)) is not None]
    return alt.hconcat(*panels).resolve_scale(color="shared", strokeDash="independent") if panels else None


def _rate_panel(wide: pd.DataFrame, keys: dict[str, str], title: str, axis: str,
                lines: list[tuple[str, str]]) -> alt.LayerChart | None:
    frame = pd.concat([wide.assign(line=name, value=wide[figure] if figure in wide else float("nan"))
                       for figure, name in lines], ignore_index=True).dropna(subset=["value", "achieved_rps"])
    if frame.empty:
        return None
    frame = frame.assign(value_text=[brief(v, "x_s") for v in frame["value"]],
                         achieved_text=[f"{v:.3g}" for v in frame["achieved_rps"]])
    scale, words = _value_scale(frame["value"])
    color = alt.Color("key:N", sort=list(keys.values()), title="setup")
    base = alt.Chart(frame).encode(
        x=alt.X("achieved_rps:Q", title="achieved requests/s (answers per second)"),
        y=alt.Y("value:Q", title=f"{axis}{words}", scale=scale), color=color,
        strokeDash=alt.StrokeDash("line:N", sort=[name for _f, name in lines], legend=None),  # named at its end
        order=alt.Order("offered_rps:Q"), detail="line:N",
        tooltip=[alt.Tooltip("key:N", title="setup"), alt.Tooltip("setup:N", title="label"),
                 alt.Tooltip("row:N", title="phase"), alt.Tooltip("line:N", title="figure"),
                 alt.Tooltip("value_text:N", title="s"), alt.Tooltip("achieved_text:N", title="achieved/s")])
    first = frame[frame["key"] == frame["key"].iloc[0]]
    ends = first.loc[first.groupby("line")["achieved_rps"].idxmax()]
    names = [alt.Chart(ends[ends["line"] == name]).mark_text(align="left", dx=6, dy=dy, fontSize=10).encode(
        x="achieved_rps:Q", y="value:Q", text="line:N", color=color)  # p50 below its point, p95 above
        for (_figure, name), dy in zip(lines, (7, -7))]
    return alt.layer(base.mark_line(point=alt.OverlayMarkDef(size=50)), *names).properties(
        title=title, width=320, height=260)


def pareto_chart(long: pd.DataFrame, keys: dict[str, str]) -> alt.LayerChart | None:
    """Total output tokens per second against the tokens per second one user reads (median decode_tps),
    one line per setup through its rates in offered order, each point labelled with its rate: the
    throughput a server gives for each speed a user gets."""
    wide = _rate_points(long, keys)
    needed = {"output_tps", "decode_tps_p50"}
    if wide.empty or not needed <= set(wide):
        return None
    frame = wide.dropna(subset=list(needed))
    if frame.empty:
        return None
    frame = frame.assign(label=frame["rate"] + "/s", total_text=[f"{v:.0f}" for v in frame["output_tps"]],
                         user_text=[f"{v:.1f}" for v in frame["decode_tps_p50"]])
    order = list(keys.values())
    base = alt.Chart(frame).encode(
        x=alt.X("decode_tps_p50:Q", title="tokens/s per user (median decode tok/s)", scale=alt.Scale(zero=False)),
        y=alt.Y("output_tps:Q", title="total output tokens/s"), color=alt.Color("key:N", sort=order, title="setup"),
        order=alt.Order("offered_rps:Q"),
        tooltip=[alt.Tooltip("key:N", title="setup"), alt.Tooltip("setup:N", title="label"),
                 alt.Tooltip("row:N", title="phase"), alt.Tooltip("total_text:N", title="total tok/s"),
                 alt.Tooltip("user_text:N", title="tok/s per user")])
    lines = base.mark_line(point=alt.OverlayMarkDef(size=50))
    labels = base.mark_text(align="left", dx=5, dy=-6, fontSize=10).encode(text="label:N")
    return alt.layer(lines, labels).properties(title="Total output tokens/s against tokens/s per user", width=360,
                                               height=260)
