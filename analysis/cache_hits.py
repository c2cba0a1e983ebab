"""Requests served from a cache beyond what they may share: per phase, pure (records in, a frame or
sentences out).

Each record says what its server reported cached (``cached_tokens``) and what it may legitimately share
with earlier requests (``shareable_tokens``, bench_tasks.cache_share); the run flagged it ``cache_hit``
when the first is above the second. Per phase (``checks``), over its successful requests (a failed one
reports no tokens):

- ``requests``: successful requests; ``checked``: those whose cached tokens the server reported and whose
  share is known, and those flagged ``cache_hit`` (by a client from before the share was recorded, too);
  ``unreported``: those whose cached tokens it did not report;
- ``hits``: requests flagged ``cache_hit``; ``hit_share`` = hits / checked;
- ``beyond_tokens``: the prompt tokens served beyond the share, summed over the checked requests;
  ``prompt_tokens``: their prompt tokens; ``beyond_share`` = beyond_tokens / prompt_tokens;
- ``repeated``: the run repeated an earlier run's mark on purpose (``mark_repeated``), so was meant to be
  served from the cache.
"""

from __future__ import annotations

import pandas as pd

from analysis.records import has_flag, measured, phase_order, succeeded
from bench_tasks.cache_share import CACHE_HIT

CHECK_COLUMNS = ["phase", "requests", "checked", "unreported", "hits", "hit_share", "beyond_tokens", "prompt_tokens",
                 "beyond_share", "repeated"]


def _number(records: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(records[column], errors="coerce").astype(float)


def checked(records: pd.DataFrame) -> pd.Series:
    """Whether each request's cache could be checked (one flagged ``cache_hit`` was)."""
    known = _number(records, "cached_tokens").notna() & _number(records, "shareable_tokens").notna()
    return known | has_flag(records, CACHE_HIT)


def checks(records: pd.DataFrame) -> pd.DataFrame:
    """One row per phase, in suite order (CHECK_COLUMNS)."""
    kept = succeeded(measured(records))
    rows = []
    for phase in phase_order(kept):
        group = kept[kept["phase"] == phase]
        known = group[checked(group)]
        beyond = (_number(known, "cached_tokens") - _number(known, "shareable_tokens")).clip(lower=0)
        prompt = _number(known, "prompt_tokens").sum()
        hits = int(has_flag(group, CACHE_HIT).sum())
        rows.append({"phase": phase, "requests": len(group), "checked": len(known),
                     "unreported": int(_number(group, "cached_tokens").isna().sum()), "hits": hits,
                     "hit_share": hits / len(known) if len(known) else float("nan"),
                     "beyond_tokens": float(beyond.sum()), "prompt_tokens": float(prompt),
                     "beyond_share": float(beyond.sum()) / prompt if prompt else float("nan"),
                     "repeated": bool(group["mark_repeated"].fillna(False).astype(bool).any())})
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


def sentences(records: pd.DataFrame) -> list[str]:
    """The warnings: a repeat meant to be served from the cache, the phases served beyond their share, and those
    whose requests could not be checked (never "0 cache hits" where nothing was known)."""
    table = checks(records)
    notes = []
    repeated = table[table["repeated"]]
    if len(repeated):
        marks = ", ".join(sorted(set(measured(records)["run_mark"].dropna().astype(str)) - {""}))
        notes.append(f"This run repeated the texts of run mark {marks} on purpose (--repeat-mark): it was meant to be "
                     "served from the server's cache, so its first tokens and prompt rates measure a warm cache, not a "
                     "fresh run.")
    for row in table[table["hits"] > 0].itertuples(index=False):
        share = f" ({row.hit_share:.0%})" if row.checked else ""
        tokens = (f", {row.beyond_tokens:.0f} of their {row.prompt_tokens:.0f} prompt tokens ({row.beyond_share:.0%})"
                  if row.prompt_tokens else "")
        why = ("as the repeat meant" if row.repeated else
               "their first token and prompt figures do not measure a fresh prompt")
        notes.append(f"{row.phase}: {row.hits} of {row.checked} requests{share}{tokens} were served from a cache "
                     f"beyond what they may share (the template's opening and the run's mark, and in a conversation "
                     f"its own earlier turns): {why}.")
    notes += _unchecked(table)
    return notes


def _unchecked(table: pd.DataFrame) -> list[str]:
    unchecked = table[(table["checked"] == 0) & (table["requests"] > 0)]
    unreported = unchecked[unchecked["unreported"] == unchecked["requests"]]
    unknown = unchecked[unchecked["unreported"] < unchecked["requests"]]
    notes = []
    if len(unreported):
        notes.append(f"{', '.join(unreported['phase'])}: the server reported no cached tokens, so whether these "
                     "requests were served from a cache could not be checked.")
    if len(unknown):
        notes.append(f"{', '.join(unknown['phase'])}: what these requests may share with the cache was not measured "
                     "(the server's tokenizer and its cache did not tell), so whether they were served from a cache "
                     "beyond it could not be checked.")
    return notes
