"""The report as a list of typed blocks, rendered once per format: Markdown and self-contained HTML.

A block is one of the small dataclasses below: ``Heading`` (the title at level 1, a section at 2, a
subsection at 3), ``Paragraph``, ``Items`` (a list), ``Labelled`` (a list under a bold label: warnings,
lost workers, problems), ``Table``, ``Headline`` (a table whose cells open on their details: the
intervals and ranges, one click or a hover away in the HTML) and ``Chart`` (a Vega-Lite spec and
its PNG). Each knows how it reads in Markdown and in HTML, so both renderings come from the same
blocks and always say the same thing. ``Findings`` holds what a report says besides its header, the
same for a run's summary and a comparison of setups.

Every report reads in one order: the legend of the setups' keys, the study's three tables, the
result in words (several setups), the capacity search, stalls, warnings, charts, then the details:
each run's header and every table with its intervals.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

import pandas as pd

from analysis import charts, headline, lost_master
from analysis.cells import display
from analysis.summary import TABLE_TITLES
from bench_tasks.formatting import MISSING

HEADLINE_NOTE = ("Each cell is the median over runs (bursts: over rounds; the slowest first token is a round's "
                 "p95). Its confidence interval, at the level it reached (order statistics: at 3 runs the min–max, "
                 "75%; 94% from 5 runs; needles found: Clopper-Pearson, 90% or more), and the min–max range are one "
                 "click (or a hover) away on each cell of the HTML, and the intervals are in the tables under "
                 "Details; – is a figure that was not measured.")
WINNERS_NOTE = ("A setup is named only where every setup's interval reaches 90% and the named one's lies wholly "
                "on the better side of every other's; with fewer runs than that takes, or overlapping intervals, "
                "the line says it can't tell.")

@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2  # 1: the report's title; 2: a section; 3: a subsection

    def markdown(self) -> str:
        return f"{'#' * self.level} {self.text}"

    def html(self, _number: int) -> str:
        return f"<h{self.level}>{_inline(self.text)}</h{self.level}>"


@dataclass(frozen=True)
class Paragraph:
    text: str

    def markdown(self) -> str:
        return self.text

    def html(self, _number: int) -> str:
        return f"<p>{_inline(self.text)}</p>"


@dataclass(frozen=True)
class Items:
    items: tuple[str, ...]

    def markdown(self) -> str:
        return "\n".join(f"- {item}" for item in self.items)

    def html(self, _number: int) -> str:
        return "<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in self.items) + "</ul>"


@dataclass(frozen=True)
class Labelled:
    """A list under a bold label, ``**Warnings**``, or a label that says more: ``**Lost workers**: ...``."""

    label: str
    items: tuple[str, ...]
    said: str = ""  # what follows the label on its line

    @property
    def lead(self) -> Paragraph:
        return Paragraph(f"**{self.label}**" + (f": {self.said}" if self.said else ""))

    def markdown(self) -> str:
        return f"{self.lead.markdown()}\n\n{Items(self.items).markdown()}"

    def html(self, number: int) -> str:
        return self.lead.html(number) + Items(self.items).html(number)


@dataclass(frozen=True, eq=False)
class Table:
    cells: pd.DataFrame

    def markdown(self) -> str:
        return markdown_table(self.cells)

    def html(self, _number: int) -> str:
        return html_table(self.cells)


@dataclass(frozen=True, eq=False)
class Headline:
    """A headline table: each cell but the first opens (a click, a hover) on the same cell of ``details``."""

    cells: pd.DataFrame
    details: pd.DataFrame

    def markdown(self) -> str:
        return markdown_table(self.cells)

    def html(self, _number: int) -> str:
        return html_table(self.cells, self.details, css_class="headline")


@dataclass(frozen=True, eq=False)
class Chart:
    name: str  # its PNG's file name, beside the Markdown
    spec: dict
    png: bytes = field(repr=False)

    def markdown(self) -> str:
        return f"![{self.name}]({self.name})"

    def html(self, number: int) -> str:
        return _chart(f"chart-{number}", self.name, self.spec)


Block = Heading | Paragraph | Items | Labelled | Table | Headline | Chart


@dataclass
class Findings:
    """What a report says besides its header, the same parts for a run and for a comparison."""

    legend: list[str]  # each setup's key and what it is
    lines: pd.DataFrame  # the headline tables' lines (headline.headline)
    keys: dict[str, str]  # setup label -> its key (A, B, ...)
    long: pd.DataFrame  # every figure, long form (summary.summary / summary.comparison)
    pictures: dict[str, tuple[dict, bytes]] = field(default_factory=dict)  # chart file -> (spec, png)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # met reading the records and the run's files
    capacity: list[str] = field(default_factory=list)  # a sentence per setup whose capacity search ran
    lost: list[str] = field(default_factory=list)  # a sentence per lost worker
    failed: list[str] = field(default_factory=list)  # a sentence per failed run
    lost_master: list[Block] = field(default_factory=list)  # lost_master_blocks' (none when the master was not lost)
    incomplete: list[str] = field(default_factory=list)  # what has no requests.csv (killed or still running)
    stalls: list[Block] = field(default_factory=list)  # stall_blocks' (none without stall figures)
    rates: list[Block] = field(default_factory=list)  # rate_blocks' (none without an open-loop run)
    winners: list[str] = field(default_factory=list)  # the result in words (several setups)


def header_items(facts: dict) -> list[str]:
    return [f"setup: {facts['setup'] or MISSING}", f"model: {facts['model'] or MISSING}",
            f"engine: {facts['engine'] or MISSING}", f"API: {facts.get('api') or MISSING}",
            f"server: {facts['server'] or MISSING}",
            f"client hosts: {facts['client_hosts'] or MISSING}", f"when: {facts['when'] or MISSING}",
            f"run mark: {facts.get('run_mark') or MISSING}",
            f"requests: {facts['requests_ok']} ok, {facts['requests_failed']} failed (warm-ups not counted)"]


def headline_blocks(lines: pd.DataFrame, keys: dict[str, str]) -> list[Block]:
    blocks = []
    for table, title in headline.HEADLINE_TITLES.items():
        mine = lines[lines["table"] == table]
        if not mine.empty:
            blocks += [Heading(title),
                       Headline(headline.cells(mine, keys), headline.cells(mine, keys, headline.detail_text))]
    return [*blocks, Paragraph(HEADLINE_NOTE)] if blocks else []


def table_blocks(long: pd.DataFrame, keys: dict[str, str] | None = None) -> list[Block]:
    blocks = []
    for table in dict.fromkeys(long["table"]):
        blocks += [Heading(f"{TABLE_TITLES.get(table, table)} (`{table}`)", 3),
                   Table(display(long[long["table"] == table], keys))]
    return blocks


def failure_sentence(failure: dict) -> str:
    """A failed run, said where the report's warnings begin."""
    return (f"**Incomplete run: the run failed**: {failure.get('cause', '?')} ({failure.get('where', '?')}, during "
            f"{failure.get('during', '?')}); the traceback is in `failure.txt`. The figures cover the requests that "
            "finished before it.")


def lost_master_blocks(statement: lost_master.Statement | None) -> list[Block]:
    """A run whose master was lost: what the report is made of and what it cannot know, then what its records
    still say."""
    if statement is None:
        return []
    return [Labelled(lost_master.LABEL, statement.unknown, statement.said),
            Labelled(lost_master.KNOWN_LABEL, statement.known)]


def warning_blocks(findings: Findings) -> list[Block]:
    blocks: list[Block] = [Paragraph(sentence) for sentence in findings.failed] + findings.lost_master
    if findings.incomplete:
        blocks.append(Paragraph("**Incomplete run**: no requests.csv in " + ", ".join(findings.incomplete) +
                                " (killed or still running); the figures cover the requests that finished."))
    for label, items, said in (("Lost workers", findings.lost, "the run went on without them"),
                               ("Warnings", findings.warnings, ""),
                               ("Problems reading the records", findings.problems, "")):
        if items:
            blocks.append(Labelled(label, tuple(items), said))
    return blocks


def capacity_blocks(sentences: list[str], long: pd.DataFrame, keys: dict[str, str] | None = None) -> list[Block]:
    """The capacity search's result, one sentence per setup that ran one, and the figures of its steps."""
    if not sentences:
        return []
    return [Heading("Capacity"), Items(tuple(sentences)), Table(display(long[long["table"] == "capacity"], keys))]


RATE_METRICS = ["offered_rps", "due_rps", "achieved_rps", "output_tps", "ttft_due_p50_s", "ttft_due_p95_s", "itl_p50_s",
                "itl_p95_s", "e2e_due_p95_s", "send_lag_p99_s", "goodput_share", "saturated"]


def rate_blocks(sentences: list[str], long: pd.DataFrame, keys: dict[str, str] | None = None) -> list[Block]:
    """The open loop's result in sentences (the highest rate that met the SLO last) and its rates' main figures."""
    if not sentences:
        return []
    windows = long[(long["table"] == "rates") & long["metric"].isin(RATE_METRICS)]
    return [Heading("Open loop: rates"), Items(tuple(sentences)),
            *([Table(display(windows, keys))] if len(windows) else [])]


def stall_blocks(sentence: str, longest: pd.DataFrame) -> list[Block]:
    """The longest stalls of the answers' streams and what was being read when they happened."""
    if not sentence:
        return []
    return [Heading("Stalls: why did an answer pause?"), Paragraph(sentence),
            *([Table(longest)] if len(longest) else [])]


def chart_blocks(pictures: dict[str, tuple[dict, bytes]]) -> list[Block]:
    if not pictures:
        return []
    return [Heading("Charts"), *[Chart(name, spec, png) for name, (spec, png) in pictures.items()]]


def summary_blocks(facts: dict, findings: Findings) -> list[Block]:
    """A run's summary: one setup, its header under Details."""
    return [Heading(f"llm-bench summary: {facts['setup'] or 'run'}", 1), Items(tuple(findings.legend)),
            *headline_blocks(findings.lines, findings.keys), *capacity_blocks(findings.capacity, findings.long),
            *findings.rates, *findings.stalls, *warning_blocks(findings), *chart_blocks(findings.pictures),
            Heading("Details"), Heading("The run", 3), Items(tuple(header_items(facts))), *table_blocks(findings.long)]


def compare_blocks(facts_by_setup: dict[str, dict], findings: Findings) -> list[Block]:
    """Several setups side by side, each table's lines keyed by setup, each setup's header under Details."""
    keys = findings.keys
    blocks = [Heading("llm-bench compare: " + " vs ".join(keys.values()), 1), Items(tuple(findings.legend)),
              *headline_blocks(findings.lines, keys)]
    if findings.winners:
        blocks += [Heading("The result, in words"), Paragraph(WINNERS_NOTE), Items(tuple(findings.winners))]
    blocks += [*capacity_blocks(findings.capacity, findings.long, keys), *findings.rates, *warning_blocks(findings),
               *chart_blocks(findings.pictures), Heading("Details")]
    for label, facts in facts_by_setup.items():
        blocks += [Heading(f"{keys[label]}: {label}", 3), Items(tuple(header_items(facts)))]
    return [*blocks, *table_blocks(findings.long, keys)]


def markdown(blocks: list[Block]) -> str:
    return "\n\n".join(block.markdown() for block in blocks) + "\n"


def markdown_table(cells: pd.DataFrame) -> str:
    def line(values) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return "\n".join([line(cells.columns), line(["---"] * len(cells.columns)),
                      *(line(row) for row in cells.itertuples(index=False))])


def to_html(blocks: list[Block], title: str, script: str | None = None) -> str:
    """One file, nothing fetched: the charts' script (``script``, else ``charts.embed_script()``) is
    inlined once, each chart's data in its spec."""
    body = "\n".join(block.html(number) for number, block in enumerate(blocks))
    has_chart = any(isinstance(block, Chart) for block in blocks)
    script = f"<script>{script or charts.embed_script()}</script>" if has_chart else ""
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style>{script}</head>\n<body>\n{body}\n</body></html>\n")


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
