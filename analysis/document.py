"""The report as text: a list of blocks, rendered to Markdown or to self-contained HTML.

A block is a tuple: ("title", text), ("heading", text), ("text", text), ("list", [items]),
("table", cells frame), ("image", file name, png bytes). Both renderings come from the same
blocks, so the Markdown and the HTML always say the same thing.
"""

from __future__ import annotations

import base64
import html

import pandas as pd

from analysis.cells import display
from analysis.summary import TABLE_TITLES


def header_items(facts: dict) -> list[str]:
    return [f"setup: {facts['setup'] or '–'}", f"model: {facts['model'] or '–'}",
            f"engine: {facts['engine'] or '–'}", f"server: {facts['server'] or '–'}",
            f"client hosts: {facts['client_hosts'] or '–'}", f"when: {facts['when'] or '–'}",
            f"requests: {facts['requests_ok']} ok, {facts['requests_failed']} failed (warm-ups not counted)"]


def table_blocks(long: pd.DataFrame, setups: list[str] | None = None) -> list[tuple]:
    blocks = []
    for table in dict.fromkeys(long["table"]):
        blocks += [("heading", f"{TABLE_TITLES.get(table, table)} (`{table}`)"),
                   ("table", display(long[long["table"] == table], setups))]
    return blocks


def warning_blocks(incomplete: list[str], warnings: list[str], problems: list[str]) -> list[tuple]:
    blocks = []
    if incomplete:
        blocks.append(("text", "**Incomplete run**: no requests.csv in " + ", ".join(incomplete) +
                       " (killed or still running); the figures cover the requests that finished."))
    if warnings:
        blocks += [("text", "**Warnings**"), ("list", warnings)]
    if problems:
        blocks += [("text", "**Problems reading the records**"), ("list", problems)]
    return blocks


def capacity_blocks(sentences: list[str]) -> list[tuple]:
    return [("text", "**Capacity**"), ("list", sentences)] if sentences else []


def summary_blocks(facts: dict, warnings: list[str], problems: list[str], long: pd.DataFrame,
                   charts: dict[str, bytes], capacity: list[str] = ()) -> list[tuple]:
    incomplete = [] if facts["complete"] else ["this directory"]
    return [("title", f"llm-bench summary: {facts['setup'] or 'run'}"), ("list", header_items(facts)),
            *warning_blocks(incomplete, warnings, problems), *capacity_blocks(list(capacity)), *table_blocks(long),
            *[("image", name, png) for name, png in charts.items()]]


def compare_blocks(facts_by_setup: dict[str, dict], warnings: list[str], problems: list[str],
                   long: pd.DataFrame, charts: dict[str, bytes], capacity: list[str] = ()) -> list[tuple]:
    setups = list(facts_by_setup)
    incomplete = [label for label, facts in facts_by_setup.items() if not facts["complete"]]
    blocks = [("title", "llm-bench compare: " + " vs ".join(setups))]
    for label, facts in facts_by_setup.items():
        blocks += [("heading", label), ("list", header_items(facts))]
    return [*blocks, *warning_blocks(incomplete, warnings, problems), *capacity_blocks(list(capacity)),
            *table_blocks(long, setups),
            *[("image", name, png) for name, png in charts.items()]]


def markdown(blocks: list[tuple]) -> str:
    parts = []
    for kind, *content in blocks:
        if kind == "title":
            parts.append(f"# {content[0]}")
        elif kind == "heading":
            parts.append(f"## {content[0]}")
        elif kind == "text":
            parts.append(content[0])
        elif kind == "list":
            parts.append("\n".join(f"- {item}" for item in content[0]))
        elif kind == "table":
            parts.append(markdown_table(content[0]))
        elif kind == "image":
            parts.append(f"![{content[0]}]({content[0]})")
    return "\n\n".join(parts) + "\n"


def markdown_table(cells: pd.DataFrame) -> str:
    def line(values) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    return "\n".join([line(cells.columns), line(["---"] * len(cells.columns)),
                      *(line(row) for row in cells.itertuples(index=False))])


def to_html(blocks: list[tuple], title: str) -> str:
    body = []
    for kind, *content in blocks:
        if kind == "title":
            body.append(f"<h1>{html.escape(content[0])}</h1>")
        elif kind == "heading":
            body.append(f"<h2>{_inline(content[0])}</h2>")
        elif kind == "text":
            body.append(f"<p>{_inline(content[0])}</p>")
        elif kind == "list":
            body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in content[0]) + "</ul>")
        elif kind == "table":
            body.append(content[0].to_html(index=False, escape=True, border=0))
        elif kind == "image":
            data = base64.b64encode(content[1]).decode("ascii")
            body.append(f'<p><img alt="{html.escape(content[0])}" src="data:image/png;base64,{data}"></p>')
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


def _inline(text: str) -> str:
    """Escape, then the two Markdown marks the blocks use: **bold** and `code`."""
    escaped = html.escape(text)
    for mark, tag in (("**", "strong"), ("`", "code")):
        pieces = escaped.split(mark)
        escaped = "".join(p if i % 2 == 0 else f"<{tag}>{p}</{tag}>" for i, p in enumerate(pieces))
    return escaped


_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:80em}"
          "table{border-collapse:collapse;margin-bottom:1em}"
          "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}"
          "td:first-child,th:first-child{text-align:left}")
