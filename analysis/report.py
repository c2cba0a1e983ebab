"""The analysis' only writer: a run's report, and the comparison of several setups.

    write_report(run_dir)              -> DIR/summary.md, summary.csv, report.html, the charts
                                          (capacity.png, total_tps.png, ttft_by_prompt.png, token_latency.png,
                                          timeline.png, rate_latency.png, pareto.png), stalls.csv (records with
                                          stall figures) and engine_clock.csv when the engine sent timings
    write_compare(dirs, labels, out)   -> OUT/compare.md, compare.csv, compare.html and the charts
                                          (capacity.png, compare.png, ttft_by_prompt.png, token_latency.png,
                                          rate_latency.png, pareto.png)

Both print nothing and return the paths they wrote (a run's report also what the terminal should say beside
them: ``Written.said``). A chart with nothing to draw is not written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from analysis import (agreement, capacity, charts, document, headline, legend, load, lost_master, lost_workers, rates,
                      stalls, study, summary, timeline, winners)
from bench_tasks.records_file import STALLS_CSV

SUMMARY_MD, SUMMARY_CSV, REPORT_HTML, ENGINE_CLOCK_CSV = "summary.md", "summary.csv", "report.html", "engine_clock.csv"
COMPARE_MD, COMPARE_CSV, COMPARE_PNG, COMPARE_HTML = "compare.md", "compare.csv", "compare.png", "compare.html"
TTFT_PNG, LATENCY_PNG, CAPACITY_PNG = "ttft_by_prompt.png", "token_latency.png", "capacity.png"
TIMELINE_PNG = "timeline.png"
RATE_LATENCY_PNG, PARETO_PNG = "rate_latency.png", "pareto.png"


class Written(list):
    """The paths a report wrote (a list of them), and in ``said`` the lines the terminal should show beside
    them: what a run whose master was lost cannot know."""

    def __init__(self, paths: list[Path], said: list[str]) -> None:
        super().__init__(paths)
        self.said = said


def write_report(run_dir) -> Written:
    run_dir = Path(run_dir)
    frame, info = load.load_run(run_dir)
    records, problems = load.merge_runs([(run_dir, frame, info)])
    metrics, metric_problems = load.load_metrics(run_dir)
    master = lost_master.statement(records, info, load.master_files(run_dir), load.load_progress(run_dir), metrics)
    settings = load.load_settings(run_dir)
    lost, lost_problems = load.load_lost_workers(run_dir)
    losses = lost_workers.losses(records, lost)
    facts = summary.facts(records, settings, list(losses["client_host"]))
    slo, slo_problems = load.load_slo(run_dir)
    long = summary.summary(records, metrics, load.load_metric_names(run_dir), setup=facts["setup"], slo=slo,
                           overdue=load.load_overdue(run_dir))
    keys = legend.setup_keys([facts["setup"]])
    items = legend.legend_items(legend.legend(keys, {facts["setup"]: facts}, {facts["setup"]: settings}))
    found = stalls.stalls(records)
    series, series_problems = load.load_engine_series(run_dir)
    pictures = _rendered({CAPACITY_PNG: charts.capacity_chart(long, keys, {facts["setup"]: slo}),
                          "total_tps.png": charts.burst_chart(long, keys),
                          TTFT_PNG: charts.ttft_by_prompt_chart(long, keys),
                          LATENCY_PNG: charts.token_latency_chart(records, keys),
                          TIMELINE_PNG: timeline.timeline_chart(records, found, series), **_rate_charts(long, keys)})
    measured_stalls = _has_stall_figures(records)
    findings = document.Findings(
        items, headline.headline(long, list(keys)), keys, long, pictures,
        study.warnings(records) + rates.warnings(records),
        problems + metric_problems + slo_problems + lost_problems + series_problems,
        capacity=capacity_sentences(records, {facts["setup"]: slo}), lost=lost_workers.sentences(losses),
        failed=[document.failure_sentence(failure)] if (failure := load.load_failure(run_dir)) else [],
        lost_master=document.lost_master_blocks(master),
        incomplete=[] if facts["complete"] or master is not None else ["this directory"],
        stalls=document.stall_blocks(stalls.sentence(found, records), stalls.longest(found)) if measured_stalls else [],
        rates=document.rate_blocks(rates.conclusion(records, slo), long))
    blocks = document.summary_blocks(facts, findings)
    written = [_text(run_dir / SUMMARY_MD, document.markdown(blocks)),
               _csv(run_dir / SUMMARY_CSV, long)]
    if measured_stalls:
        written.append(_csv(run_dir / STALLS_CSV, found))
    written += [_bytes(run_dir / name, png) for name, (_spec, png) in pictures.items()]
    written.append(_text(run_dir / REPORT_HTML, document.to_html(blocks, f"llm-bench: {facts['setup']}",
                                                                 _embed_script(pictures))))
    per_request = agreement.engine_clock(records)
    if not per_request.empty:
        written.append(_csv(run_dir / ENGINE_CLOCK_CSV, per_request))
    return Written(written, master.lines() if master is not None else [])


def write_compare(dirs, labels, out_dir) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records, problems = load.load_runs([Path(d) for d in dirs], list(labels) if labels else None)
    metrics = _metrics_by_setup(records, problems)
    names = {label: load.load_metric_names(mine["run_dir"].iloc[0]) for label, mine in records.groupby("setup")}
    slos = _slos_by_setup(records, problems)
    overdue = {label: {phase: n for run_dir in mine["run_dir"].unique()
                       for phase, n in load.load_overdue(run_dir).items()}
               for label, mine in records.groupby("setup", sort=False)}
    long = summary.comparison(records, metrics, names, slos, overdue)
    setups = summary.setups(records)
    keys = legend.setup_keys(setups)
    by_setup = {label: records[records["setup"] == label] for label in setups}
    settings = {label: load.load_settings(mine["run_dir"].iloc[0]) for label, mine in by_setup.items()}
    losses = {label: _losses(mine, problems) for label, mine in by_setup.items()}
    facts = {label: summary.facts(mine, settings[label], list(losses[label]["client_host"]))
             for label, mine in by_setup.items()}
    warnings = [f"{keys[label]} ({label}): {w}" for label, mine in by_setup.items()
                for w in study.warnings(mine) + rates.warnings(mine)]
    lines = headline.headline(long, setups)
    pictures = _rendered({CAPACITY_PNG: charts.capacity_chart(long, keys, slos),
                          COMPARE_PNG: charts.burst_chart(long, keys),
                          TTFT_PNG: charts.ttft_by_prompt_chart(long, keys),
                          LATENCY_PNG: charts.token_latency_chart(records, keys), **_rate_charts(long, keys)})
    failures = {label: failure for label, mine in by_setup.items() for run_dir in mine["run_dir"].unique()
                if (failure := load.load_failure(run_dir)) is not None}
    findings = document.Findings(
        legend.legend_items(legend.legend(keys, facts, settings)), lines, keys, long, pictures, warnings, problems,
        capacity=capacity_sentences(records, slos, keys),
        lost=[f"{keys[label]} ({label}): {sentence}" for label, table in losses.items()
              for sentence in lost_workers.sentences(table)],
        failed=[f"{keys[label]} ({label}): {document.failure_sentence(failure)}"
                for label, failure in failures.items()],
        incomplete=[label for label, mine in facts.items() if not mine["complete"]],
        winners=winners.winners(lines, keys),
        rates=document.rate_blocks(_rate_sentences(by_setup, slos, keys), long, keys))
    blocks = document.compare_blocks(facts, findings)
    written = [_text(out_dir / COMPARE_MD, document.markdown(blocks)), _csv(out_dir / COMPARE_CSV, long)]
    written += [_bytes(out_dir / name, png) for name, (_spec, png) in pictures.items()]
    written.append(_text(out_dir / COMPARE_HTML, document.to_html(blocks, "llm-bench compare",
                                                                  _embed_script(pictures))))
    return written


def _rate_sentences(by_setup: dict[str, pd.DataFrame], slos: dict, keys: dict[str, str]) -> list[str]:
    """Each setup's open-loop sentences (rates.conclusion), opened by its key and label."""
    return [f"{keys[label]} ({label}): {line}" for label, mine in by_setup.items()
            for line in rates.conclusion(mine, slos[label])]


def _rate_charts(long: pd.DataFrame, keys: dict[str, str]) -> dict:
    return {RATE_LATENCY_PNG: charts.rate_latency_chart(long, keys), PARETO_PNG: charts.pareto_chart(long, keys)}


def _has_stall_figures(records: pd.DataFrame) -> bool:
    """Records of a client that looks for stalls (older runs' records have no stall figures)."""
    return bool(pd.to_numeric(records["stall_count"], errors="coerce").notna().any())


def _metrics_by_setup(records: pd.DataFrame, problems: list[str]) -> dict[str, pd.DataFrame]:
    """Each setup's metric readings: those of the directories its records came from."""
    found = {}
    for label, mine in records.groupby("setup", sort=False):
        frames = []
        for run_dir in mine["run_dir"].unique():
            frame, more = load.load_metrics(run_dir)
            frames.append(frame)
            problems += [f"{run_dir}: {p}" for p in more]
        found[label] = pd.concat(frames, ignore_index=True)
    return found


def capacity_sentences(records: pd.DataFrame, slos: dict, keys: dict[str, str] | None = None) -> list[str]:
    """Each setup's capacity search result in one sentence (setups without a search say nothing);
    with ``keys`` (a comparison) each sentence opens with its setup."""
    sentences = []
    for label, slo in slos.items():
        steps = capacity.steps(records[records["setup"] == label], slo) if slo is not None else pd.DataFrame()
        if not steps.empty:
            sentences.append((f"{keys[label]} ({label}): " if keys else "") + capacity.conclusion(steps, slo))
    return sentences


def _losses(records: pd.DataFrame, problems: list[str]) -> pd.DataFrame:
    """The workers lost by the runs a setup's records came from (``lost_workers.losses``)."""
    frames = []
    for run_dir in records["run_dir"].unique():
        lost, more = load.load_lost_workers(run_dir)
        problems += [f"{run_dir}: {p}" for p in more]
        frames.append(lost_workers.losses(records, lost))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=lost_workers.LOSS_COLUMNS)


def _slos_by_setup(records: pd.DataFrame, problems: list[str]) -> dict:
    """Each setup's SLO: the one its capacity search judged by (the first of its directories that ran one)."""
    found = {}
    for label, mine in records.groupby("setup", sort=False):
        found[label] = None
        for run_dir in mine["run_dir"].unique():
            slo, more = load.load_slo(run_dir)
            problems += [f"{run_dir}: {p}" for p in more]
            found[label] = found[label] or slo
    return found


def _rendered(pictures: dict) -> dict[str, tuple[dict, bytes]]:
    """Each chart that has something to draw as (its Vega-Lite spec, its PNG)."""
    specs = {name: charts.spec(chart) for name, chart in pictures.items() if chart is not None}
    return {name: (spec, charts.png(spec)) for name, spec in specs.items()}


def _embed_script(pictures: dict) -> str | None:
    """The charts' script, bundled once per Vega-Lite and vl-convert version and kept in
    ``$LLM_BENCH_CACHE`` (default ~/.cache/llm-bench): bundling it costs seconds, every report. None
    when there is no chart; bundled afresh when the cache cannot be read or written."""
    if not pictures:
        return None
    path = Path(os.environ.get("LLM_BENCH_CACHE") or Path.home() / ".cache" / "llm-bench") / charts.SCRIPT_NAME
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeError):
        pass
    script = charts.embed_script()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(script, encoding="utf-8")
        partial.replace(path)  # whole or not at all, whoever reads it meanwhile
    except OSError:
        pass
    return script


def _text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _csv(path: Path, frame: pd.DataFrame) -> Path:
    """Missing values are empty cells, never 0."""
    frame.to_csv(path, index=False, na_rep="")
    return path
