"""The report as text: a list of blocks, rendered to Markdown or to self-contained HTML.

A block is a tuple: ("title", text), ("heading", text), ("subheading", text), ("text", text),
("list", [items]), ("table", cells frame), ("headline", cells frame, details frame) (a headline
table: the details are the intervals and ranges, one click or a hover away in the HTML), ("chart",
file name, Vega-Lite spec, png bytes). Both renderings come from the same blocks, so the Markdown and the HTML always
say the same thing.

Every report reads in one order: the legend of the setups' keys, the study's three tables, the
result in words (several setups), warnings, charts, then the details: each run's header and
every table with its intervals.
"""

from __future__ import annotations

import html
import json

import pandas as pd

from analysis import charts, headline
from analysis.cells import display
from analysis.summary import TABLE_TITLES
from bench_tasks.figures import MISSING

HEADLINE_NOTE = ("Each cell is the median over runs (bursts: over rounds; the slowest first token is a round's "
                 "p95). Its confidence interval, at the level it reached (order statistics: at 3 runs the min–max, "
                 "75%; 94% from 5 runs; needles found: Clopper-Pearson, 90% or more), and the min–max range are one "
                 "click (or a hover) away on each cell of the HTML, and the intervals are in the tables under "
                 "Details; – is a figure that was not measured.")
WINNERS_NOTE = ("A setup is named only where every setup's interval reaches 90% and the named one's lies wholly "
                "on the better side of every other's; with fewer runs than that takes, or overlapping intervals, "
                "the line says it can't tell.")


def header_items(facts: dict) -> list[str]:
    return [f"setup: {facts['setup'] or MISSING}", f"model: {facts['model'] or MISSING}",
            f"engine: {facts['engine'] or MISSING}", f"server: {facts['server'] or MISSING}",
            f"client hosts: {facts['client_hosts'] or MISSING}", f"when: {facts['when'] or MISSING}",
            f"run mark: {facts.get('run_mark') or MISSING}",
            f"requests: {facts['requests_ok']} ok, {facts['requests_failed']} failed (warm-ups not counted)"]


def headline_blocks(lines: pd.DataFrame, keys: dict[str, str]) -> list[tuple]:
    blocks = []
    for table, title in headline.HEADLINE_TITLES.items():
        mine = lines[lines["table"] == table]
        if not mine.empty:
            blocks += [("heading", title),
                       ("headline", headline.cells(mine, keys), headline.cells(mine, keys, headline.detail_text))]
    return [*blocks, ("text", HEADLINE_NOTE)] if blocks else []


def table_blocks(long: pd.DataFrame, keys: dict[str, str] | None = None) -> list[tuple]:
    blocks = []
    for table in dict.fromkeys(long["table"]):
        blocks += [("subheading", f"{TABLE_TITLES.get(table, table)} (`{table}`)"),
                   ("table", display(long[long["table"] == table], keys))]
    return blocks


def failure_sentence(failure: dict) -> str:
    """A failed run, said where the report's warnings begin."""
    return (f"**Incomplete run: the run failed**: {failure.get('cause', '?')} ({failure.get('where', '?')}, during "
            f"{failure.get('during', '?')}); the traceback is in `failure.txt`. The figures cover the requests that "
            "finished before it.")


def warning_blocks(incomplete: list[str], warnings: list[str], problems: list[str],
                   failed: list[str] = (), lost: list[str] = ()) -> list[tuple]:
    blocks = [("text", sentence) for sentence in failed]
    if incomplete:
        blocks.append(("text", "**Incomplete run**: no requests.csv in " + ", ".join(incomplete) +
                       " (killed or still running); the figures cover the requests that finished."))
    if lost:
        blocks += [("text", "**Lost workers**: the run went on without them"), ("list", list(lost))]
    if warnings:
        blocks += [("text", "**Warnings**"), ("list", warnings)]
    if problems:
        blocks += [("text", "**Problems reading the records**"), ("list", problems)]
    return blocks


def capacity_blocks(sentences: list[str], long: pd.DataFrame, keys: dict[str, str] | None = None) -> list[tuple]:
    """The capacity search's result, one sentence per setup that ran one, and the figures of its steps."""
    if not sentences:
        return []
    steps = long[long["table"] == "capacity"]
    return [("heading", "Capacity"), ("list", sentences), ("table", display(steps, keys))]


def stall_blocks(sentence: str, longest: pd.DataFrame) -> list[tuple]:
    """The longest stalls of the answers' streams and what was being read when they happened."""
    if not sentence:
        return []
    return [("heading", "Stalls: why did an answer pause?"), ("text", sentence),
            *([("table", longest)] if len(longest) else [])]


def chart_blocks(pictures: dict[str, tuple[dict, bytes]]) -> list[tuple]:
    if not pictures:
        return []
    return [("heading", "Charts"), *[("chart", name, spec, png) for name, (spec, png) in pictures.items()]]


def summary_blocks(facts: dict, legend: list[str], lines: pd.DataFrame, keys: dict[str, str],
                   warnings: list[str], problems: list[str], long: pd.DataFrame,
                   pictures: dict[str, tuple[dict, bytes]], capacity: list[str] = (),
                   failure: dict | None = None, lost: list[str] = (), stalls: list[tuple] = ()) -> list[tuple]:
    """``stalls``: stall_blocks' blocks (none when the records have no stall figures)."""
    incomplete = [] if facts["complete"] else ["this directory"]
    failed = [failure_sentence(failure)] if failure else []
    return [("title", f"llm-bench summary: {facts['setup'] or 'run'}"), ("list", legend),
            *headline_blocks(lines, keys), *capacity_blocks(list(capacity), long), *stalls,
            *warning_blocks(incomplete, warnings, problems, failed, lost),
            *chart_blocks(pictures), ("heading", "Details"), ("subheading", "The run"),
            ("list", header_items(facts)), *table_blocks(long)]


def compare_blocks(facts_by_setup: dict[str, dict], legend: list[str], lines: pd.DataFrame,
                   keys: dict[str, str], winners: list[str], warnings: list[str], problems: list[str],
                   long: pd.DataFrame, pictures: dict[str, tuple[dict, bytes]],
                   capacity: list[str] = (), failures: dict[str, dict] | None = None,
                   lost: list[str] = ()) -> list[tuple]:
    """``failures``: a setup's failed run (its failure.json), by label."""
    incomplete = [label for label, facts in facts_by_setup.items() if not facts["complete"]]
    failed = [f"{keys[label]} ({label}): {failure_sentence(failure)}" for label, failure in (failures or {}).items()]
    blocks = [("title", "llm-bench compare: " + " vs ".join(keys.values())), ("list", legend),
              *headline_blocks(lines, keys)]
    if winners:
        blocks += [("heading", "The result, in words"), ("text", WINNERS_NOTE), ("list", winners)]
    blocks += [*capacity_blocks(list(capacity), long, keys),
               *warning_blocks(incomplete, warnings, problems, failed, lost),
               *chart_blocks(pictures), ("heading", "Details")]
    for label, facts in facts_by_setup.items():
        blocks += [("subheading", f"{keys[label]}: {label}"), ("list", header_items(facts))]
    return [*blocks, *table_blocks(long, keys)]


def markdown(blocks: list[tuple]) -> str:
    parts = []
    for kind, *content in blocks:
        if kind == "title":
            parts.append(f"# {content[0]}")
        elif kind == "heading":
            parts.append(f"## {content[0]}")
        elif kind == "subheading":
            parts.append(f"### {content[0]}")
        elif kind == "text":
            parts.append(content[0])
        elif kind == "list":
            parts.append("\n".join(f"- {item}" for item in content[0]))
        elif kind in ("table", "headline"):
            parts.append(markdown_table(content[0]))
        elif kind == "chart":
            parts.append(f"![{content[0]}]({content[0]})")
    return "\n\n".join(parts) + "\n"


def markdown_table(cells: pd.DataFrame) -> str:
    def line(values) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return "\n".join([line(cells.columns), line(["---"] * len(cells.columns)),
                      *(line(row) for row in cells.itertuples(index=False))])


def to_html(blocks: list[tuple], title: str, script: str | None = None) -> str:
    """One file, nothing fetched: the charts' script (``script``, else ``charts.embed_script()``) is
    inlined once, each chart's data in its spec."""
    body, has_chart = [], any(kind == "chart" for kind, *_ in blocks)
    for number, (kind, *content) in enumerate(blocks):
        if kind == "title":
            body.append(f"<h1>{html.escape(content[0])}</h1>")
        elif kind == "heading":
            body.append(f"<h2>{_inline(content[0])}</h2>")
        elif kind == "subheading":
            body.append(f"<h3>{_inline(content[0])}</h3>")
        elif kind == "text":
            body.append(f"<p>{_inline(content[0])}</p>")
        elif kind == "list":
            body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in content[0]) + "</ul>")
        elif kind == "table":
            body.append(html_table(content[0]))
        elif kind == "headline":
            body.append(html_table(content[0], content[1], css_class="headline"))
        elif kind == "chart":
            body.append(_chart(f"chart-{number}", content[0], content[1]))
    script = f"<script>{script or charts.embed_script()}</script>" if has_chart else ""
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style>{script}</head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def html_table(cells: pd.DataFrame, details: pd.DataFrame | None = None, css_class: str = "") -> str:
    """A table whose headers may break after ``_``; with ``details``, each cell but the first opens
    on a click (and shows on hover) to the same cell of ``details``. A table of many columns (the
    engine's counters beside the client's) is set smaller, and any table scrolls in its own box
    rather than widen the page."""
    if len(cells.columns) > WIDE_COLUMNS:
        css_class = f"{css_class} wide".strip()
    head = "".join(f"<th>{_breakable(str(c))}</th>" for c in cells.columns)
    rows = []
    for i, values in enumerate(cells.itertuples(index=False)):
        tds = []
        for j, value in enumerate(values):
            text = html.escape(str(value))
            if details is not None and j > 0:
                more = html.escape(str(details.iat[i, j]))
                text = f'<details title="{more}"><summary>{text}</summary><small>{more}</small></details>'
            tds.append(f"<td>{text}</td>")
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return (f'<div class="table"><table class="{css_class}"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table></div>")


def _breakable(text: str) -> str:
    return html.escape(text).replace("_", "_<wbr>")


def _chart(element_id: str, name: str, spec: dict) -> str:
    # "</" inside a script would end it early: a setup label could hold "</script>".
    data = json.dumps(spec).replace("</", "<\\/")
    options = json.dumps({"actions": False, "renderer": "svg"})
    return (f'<figure id="{element_id}" class="chart" data-name="{html.escape(name)}"></figure>'
            f"<script>vegaEmbed('#{element_id}', {data}, {options}).catch(console.error);</script>")


def _inline(text: str) -> str:
    """Escape, then the two Markdown marks the blocks use: **bold** and `code`."""
    escaped = html.escape(text)
    for mark, tag in (("**", "strong"), ("`", "code")):
        pieces = escaped.split(mark)
        escaped = "".join(p if i % 2 == 0 else f"<{tag}>{p}</{tag}>" for i, p in enumerate(pieces))
    return escaped


WIDE_COLUMNS = 12
_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:88em}"
          "div.table{max-width:100%;overflow-x:auto}table.wide{font-size:.75em}"
          "table{border-collapse:collapse;margin-bottom:1em;font-size:.9em}"
          "th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right;vertical-align:top}"
          "td:first-child,th:first-child{text-align:left}"
          "table.headline{font-size:1em}table.headline td{white-space:nowrap}"
          "details summary{cursor:pointer;list-style:none}details summary::-webkit-details-marker{display:none}"
          "details[open] summary{font-weight:bold}details small{display:block;white-space:normal;color:#444}"
          "figure.chart{margin:1em 0}")
