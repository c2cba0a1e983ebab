"""A phase's figures, defined once: the live table (the web UI's LLM tab, the command line's progress line),
the overview printed after a run and the report's burst rounds all compute them here, as the search and
the report both judge a step with ``slo.judge``.

Per phase, over its measured records (warm-ups are left out by the caller): ``requests``, ``errors``
(failed requests: counted, never averaged in), ``ttft_p50_s``, ``ttft_p95_s``, ``decode_tps_p50`` (of
the successful requests) and ``total_tps``: the tokens the successful requests generated over the time
they took. A burst's (its requests released together: scenario ``burst``, or a ``release_offset_s``)
is the median over its rounds of each round's tokens over the time from its release to its last answer
(the pauses between rounds are not the server's); when a successful request of a round has no release
offset, and for any other phase, the time is the span from the first send to the last end, each send
at ``t_send + clock_offset_s`` (0 when unknown) so that records of several machines share a clock.

Percentiles interpolate linearly (numpy's default: ``statistics.quantile``). A figure of no values is
missing (None), never 0, and shows as ``formatting.MISSING`` wherever a figure is written out as text.
Pure and stdlib-only, on record dicts (a record's JSON, or a DataFrame row as a dict).
"""

from __future__ import annotations

from collections import defaultdict

from bench_tasks.statistics import median, quantile

FIGURES = ("requests", "errors", "ttft_p50_s", "ttft_p95_s", "decode_tps_p50", "total_tps")
READS = ("scenario", "round", "ok", "ttft_s", "decode_tps", "completion_tokens", "t_send", "clock_offset_s", "e2e_s",
         "release_offset_s")  # the record fields the figures are made of


def number(value) -> float | None:
    """A record's figure as a float, or None when it is missing (None, NaN, pandas' NA)."""
    if type(value) is float:  # most figures: no conversion to try
        return None if value != value else value
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return None if result != result else result


def succeeded(row: dict) -> bool:
    try:
        return bool(row.get("ok"))
    except TypeError:  # pandas' NA: not known to have succeeded
        return False


class Span:
    """Tokens of successful requests over the time they took: from the first send to the last end, or, for
    requests released together, from the release to the last end."""

    def __init__(self) -> None:
        self.tokens: float | None = None  # None: no request said how many tokens it generated
        self.first_send: float | None = None
        self.last_end: float | None = None
        self.released_end: float | None = None  # latest release_offset_s + e2e_s
        self.unreleased = False  # a request without a release offset: the span runs from the first send

    def add(self, row: dict) -> None:
        """One successful request."""
        tokens, e2e = number(row.get("completion_tokens")), number(row.get("e2e_s")) or 0.0
        if tokens is not None:
            self.tokens = (self.tokens or 0.0) + tokens
        send = number(row.get("t_send"))
        if send is not None:
            send += number(row.get("clock_offset_s")) or 0.0
            self.first_send = send if self.first_send is None else min(self.first_send, send)
            self.last_end = send + e2e if self.last_end is None else max(self.last_end, send + e2e)
        offset = number(row.get("release_offset_s"))
        if offset is None:
            self.unreleased = True
        else:
            self.released_end = offset + e2e if self.released_end is None else max(self.released_end, offset + e2e)

    def span_s(self, released: bool) -> float | None:
        if released and not self.unreleased:
            return self.released_end
        return None if self.first_send is None else self.last_end - self.first_send

    def total_tps(self, released: bool = False) -> float | None:
        span = self.span_s(released)
        return self.tokens / span if self.tokens is not None and span is not None and span > 0 else None


class Phase:
    """A phase's figures over its records, fed one at a time."""

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.ttfts: list[float] = []
        self.decodes: list[float] = []
        self.span = Span()  # a phase's requests that were not released together
        self.rounds: dict = defaultdict(Span)  # a burst's: round -> its span from the release

    def add(self, row: dict) -> None:
        self.requests += 1
        if not succeeded(row):
            self.errors += 1
            return
        for values, column in ((self.ttfts, "ttft_s"), (self.decodes, "decode_tps")):
            value = number(row.get(column))
            if value is not None:
                values.append(value)
        if row.get("scenario") == "burst" or number(row.get("release_offset_s")) is not None:
            self.rounds[number(row.get("round"))].add(row)
        else:
            self.span.add(row)

    def figures(self) -> dict:
        ttfts, decodes = sorted(self.ttfts), sorted(self.decodes)
        return {"requests": self.requests, "errors": self.errors,
                "ttft_p50_s": quantile(ttfts, 0.5) if ttfts else None,
                "ttft_p95_s": quantile(ttfts, 0.95) if ttfts else None,
                "decode_tps_p50": quantile(decodes, 0.5) if decodes else None,
                "total_tps": self.total_tps()}

    def total_tps(self) -> float | None:
        if not self.rounds:
            return self.span.total_tps()
        return median([span.total_tps(released=True) for span in self.rounds.values()])


def phase(rows) -> dict:
    """The figures of one phase's records."""
    figures = Phase()
    for row in rows:
        figures.add(row)
    return figures.figures()
