"""A report's Markdown read back into ``analysis.document``'s blocks, so that a test reads a report by its
structure (the list of "The result, in words", the Warnings list, a table's cells), never by what
happens to sit between two headings.

``analysis.document.markdown`` writes each block apart from the next by a blank line; this reads them
back: ``#``, ``##``, ``###`` a heading of that level, lines of ``- `` a list, lines of ``| `` a table (its
cells as text), ``![f](f)`` a chart, a line that is only a bold label (or a bold label and a colon)
followed by a list a ``Labelled`` list, anything else a paragraph. A headline table reads back as a
table: its details are the HTML's.
"""

from __future__ import annotations

import re

import pandas as pd

from analysis.document import Block, Chart, Heading, Items, Labelled, Paragraph, Table

_LABEL = re.compile(r"\*\*(?P<label>[^*]+)\*\*(?:: (?P<said>.*))?")
_CELL_EDGE = re.compile(r"(?<!\\) \| ")


def blocks_of(markdown: str) -> list[Block]:
    chunks = markdown.strip("\n").split("\n\n")
    blocks: list[Block] = []
    for i, chunk in enumerate(chunks):
        if blocks and isinstance(blocks[-1], Labelled) and not blocks[-1].items:
            blocks[-1] = Labelled(blocks[-1].label, _items(chunk), blocks[-1].said)
            continue
        label = _LABEL.fullmatch(chunk)
        if label and i + 1 < len(chunks) and _is_list(chunks[i + 1]):
            blocks.append(Labelled(label["label"], (), label["said"] or ""))
        elif re.match(r"#{1,3} ", chunk):
            level = len(chunk.split(" ", 1)[0])
            blocks.append(Heading(chunk[level + 1:], level))
        elif _is_list(chunk):
            blocks.append(Items(_items(chunk)))
        elif chunk.startswith("| "):
            blocks.append(Table(_table(chunk)))
        elif re.fullmatch(r"!\[([^]]*)\]\(\1\)", chunk):
            blocks.append(Chart(chunk[2:chunk.index("]")], {}, b""))
        else:
            blocks.append(Paragraph(chunk))
    return blocks


def section(blocks: list[Block], title: str) -> list[Block]:
    """The blocks under the heading ``title``, up to the next heading of its level or above."""
    start = next(i for i, block in enumerate(blocks) if isinstance(block, Heading) and block.text == title)
    level = blocks[start].level
    rest = blocks[start + 1:]
    end = next((i for i, block in enumerate(rest) if isinstance(block, Heading) and block.level <= level), len(rest))
    return rest[:end]


def lists(blocks: list[Block]) -> list[tuple[str, ...]]:
    """The unlabelled lists' items, in order (a Labelled list, such as the warnings, is not one of them)."""
    return [block.items for block in blocks if isinstance(block, Items)]


def labelled(blocks: list[Block], label: str) -> Labelled:
    return next(block for block in blocks if isinstance(block, Labelled) and block.label == label)


def tables(blocks: list[Block]) -> list[pd.DataFrame]:
    return [block.cells for block in blocks if isinstance(block, Table)]


def _is_list(chunk: str) -> bool:
    return all(line.startswith("- ") for line in chunk.splitlines())


def _items(chunk: str) -> tuple[str, ...]:
    return tuple(line[2:] for line in chunk.splitlines())


def _table(chunk: str) -> pd.DataFrame:
    header, _rule, *lines = ([cell.replace("\\|", "|") for cell in _CELL_EDGE.split(line[2:-2])]
                             for line in chunk.splitlines())
    return pd.DataFrame(lines, columns=header)
