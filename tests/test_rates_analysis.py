"""The open loop's figures per rate, from synthetic records whose every answer is known: offered, due,
sent and achieved rates, latencies timed from due with their intervals, send lag, late and never-sent
requests, saturation, goodput with an SLO, the floods' saturation rate and the sentences."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from analysis import charts, rates, report
from analysis.document import Table
from analysis.load import typed
from bench_tasks import slo
from bench_tasks.arrivals import parse
from bench_tasks.open_loop import OpenLoop
from bench_tasks.sweep import Sweep, SweepOptions
from bench_tasks.errors import NOT_SENT
from bench_tasks.record import COLUMNS, Record
from bench_tasks.records_file import SWEEP_JSONL, write_csv
from tests import documents
from tests.open_loop_room import Room

TOKENS = 64


def request(phase: str, due: float, *, rate: float | None = 4.0, lag: float = 0.002, ttft: float = 0.1,
            e2e: float = 1.0, ok: bool = True, offset: float | None = None, **more) -> dict:
    """A record due at ``due`` (the master's clock), sent ``lag`` later, as the run writes it."""
    local_due = due - (offset or 0.0)
    fields = {"scenario": "rate", "phase": phase, "offered_rps": rate, "t_due": local_due, "ok": ok,
              "t_send": local_due + lag, "send_lag_s": lag, "clock_offset_s": offset, **more}
    if ok:
        fields |= {"ttft_s": ttft, "e2e_s": e2e, "ttft_due_s": lag + ttft, "e2e_due_s": lag + e2e,
                   "completion_tokens": TOKENS, "decode_s": e2e - ttft, "itl_s": (e2e - ttft) / (TOKENS - 1),
                   "decode_tps": (TOKENS - 1) / (e2e - ttft)}
    return {**Record().to_dict(), **fields}


def steady(rate: float = 4.0, window_s: float = 10.0, **kinds) -> list[dict]:
    """Settle (2 s), a window of window_s and a drain (2 s) at a constant rate, every answer alike."""
    gap = 1 / rate
    label = f"rate-{rate:g}"
    rows = [request(f"settle-{label}", -2 + k * gap, rate=rate, **kinds) for k in range(int(2 * rate))]
    rows += [request(label, k * gap, rate=rate, **kinds) for k in range(int(window_s * rate) + 1)]
    rows += [request(f"drain-{label}", window_s + (k + 1) * gap, rate=rate, **kinds) for k in range(int(2 * rate))]
    return rows


def records(rows: list[dict]) -> pd.DataFrame:
    return typed(pd.DataFrame(rows, columns=list(COLUMNS)))


def test_a_window_that_kept_up_says_so_figure_by_figure():
    found = rates.steps(records(steady()))
    assert len(found) == 1
    step = found.iloc[0]
    assert step["phase"] == "rate-4" and step["offered_rps"] == 4.0 and step["span_s"] == pytest.approx(10.0)
    assert (step["requests"], step["sent"], step["ok"], step["failed"], step["not_sent"], step["late"]) == (
        41, 41, 41, 0, 0, 0)
    assert step["due_rps"] == pytest.approx(4.0)
    # Sent within [0, 10]: the window's requests due at 0 ... 9.75 (the one due at 10 left at 10.002).
    assert step["sent_rps"] == pytest.approx(4.0)
    # Ended within [0, 10]: due at -1 ... 8.75 (each ends 1.002 s after it was due): 4 settle, 36 window.
    assert step["achieved_rps"] == pytest.approx(4.0)
    assert step["output_tps"] == pytest.approx(4.0 * TOKENS)
    assert step["ttft_due_p50_s"] == pytest.approx(0.102) and step["ttft_due_p99_s"] == pytest.approx(0.102)
    assert step["e2e_due_p95_s"] == pytest.approx(1.002) and step["itl_p50_s"] == pytest.approx(0.9 / 63)
    assert step["send_lag_p50_s"] == pytest.approx(0.002) and step["send_lag_p99_s"] == pytest.approx(0.002)
    assert step["decode_tps_p50"] == pytest.approx(63 / 0.9)
    assert step["saturated"] == 0.0
    assert step["ttft_due_p50_low_s"] == pytest.approx(0.102) and step["ttft_due_p50_level"] == pytest.approx(0.9)
    assert rates.warnings(records(steady())) == []


def test_goodput_is_timed_from_when_each_request_was_due():
    rows = records(steady())
    tight = rates.steps(rows, slo.parse("ttft_p95=0.1")).iloc[0]
    # Every first token came 0.1 s after the send, 0.102 s after it was due: none met a 0.1 s goal.
    assert tight["goodput_share"] == 0.0 and tight["goodput_rps"] == 0.0 and tight["outcome"] == slo.MISSES
    loose = rates.steps(rows, slo.parse("ttft_p95=0.2,itl_p50=0.05")).iloc[0]
    assert loose["goodput_share"] == 1.0 and loose["goodput_rps"] == pytest.approx(4.0)
    assert loose["outcome"] == slo.MEETS and loose["meets_slo"] == 1.0
    # Every goal must hold for a request to count (DistServe): one goal missed by all, goodput nothing.
    both = rates.steps(rows, slo.parse("ttft_p95=0.2,itl_p50=0.001")).iloc[0]
    assert both["goodput_share"] == 0.0


def test_a_server_that_answers_half_the_rate_did_not_follow():
    # Due 4 per second, answered one after the other every 0.5 s: the queue grows by 2 a second.
    rows = []
    for k in range(41):
        due, end = k * 0.25, 1.0 + k * 0.5
        rows.append(request("rate-4", due, e2e=end - due - 0.002, ttft=0.05))
    found = rates.steps(records(rows), slo.parse("ttft_p95=5")).iloc[0]
    assert found["achieved_rps"] == pytest.approx(19 / 10)  # answers ending at 1.0, 1.5, ... 10.0
    assert found["saturated"] == 1.0
    # Its first tokens were within 5 s, but its waits grow as long as it lasts: it does not meet the SLO.
    assert found["outcome"] == slo.MISSES and "did not follow" in found["missed"]


def test_late_and_never_sent_requests_are_counted_and_warned_of():
    rows = steady(lag=0.002)
    window = [row for row in rows if row["phase"] == "rate-4"]
    for row in window[:5]:  # sent 50 ms late
        row.update(request("rate-4", row["t_due"], lag=0.05))
    for row in window[-3:]:  # never sent
        row.update({**Record().to_dict(), "scenario": "rate", "phase": "rate-4", "offered_rps": 4.0,
                    "t_due": row["t_due"], "ok": False, "error": NOT_SENT})
    data = records(rows)
    step = rates.steps(data).iloc[0]
    assert (step["requests"], step["sent"], step["late"], step["not_sent"], step["failed"]) == (41, 38, 5, 3, 0)
    assert step["send_lag_p99_s"] == pytest.approx(0.05)
    [warning] = rates.warnings(data)
    assert warning.startswith("rate-4: the client fell behind its schedule")
    assert "5 of 41 requests left more than 5 ms after they were due" in warning and "3 were never sent" in warning


def test_machines_meet_on_the_masters_clock():
    # The same window, its requests sent by two laptops whose clocks are 500 s apart: nothing changes.
    one = rates.steps(records(steady())).iloc[0]
    rows = steady()
    for i, row in enumerate(rows):
        if i % 2:
            row.update(request(row["phase"], row["t_due"], offset=500.0))
    two = rates.steps(records(rows)).iloc[0]
    for column in ("span_s", "due_rps", "sent_rps", "achieved_rps", "output_tps", "saturated"):
        assert two[column] == pytest.approx(one[column])


def test_floods_give_the_saturation_rate_by_littles_law():
    rows = []
    for n, took in ((1, 0.5), (2, 0.5), (4, 0.5), (8, 1.0)):  # 4 slots of 0.5 s: 8 per second at 4 and more
        unscheduled = {"t_due": None, "send_lag_s": None, "ttft_due_s": None, "e2e_due_s": None}
        rows += [request(f"flood-{n}", i * took / n, rate=None, lag=0.0, e2e=took) | unscheduled
                 for i in range(n + 20)]
    flooded = rates.floods(records(rows))
    assert list(flooded["in_flight"]) == [1, 2, 4, 8]
    assert list(flooded["answers_rps"]) == pytest.approx([2.0, 4.0, 8.0, 8.0])
    assert rates.saturation(flooded) == (pytest.approx(8.0), False)
    climbing = rates.saturation(flooded.iloc[:3])
    assert climbing[1] is True  # the largest flood still gained: more in flight might answer more


def test_the_tables_and_the_sentences_of_a_sweep():
    room = Room(slots=4, service_s=0.5, first_token_s=0.05)
    options = SweepOptions(None, parse("constant"), settle_s=2.0, window_s=10.0, min_requests=20, probe_s=2.0)
    data = records(room.run(OpenLoop(Sweep(options), room.now)))
    goal = slo.parse("ttft_p95=0.3")
    long = rates.tables(data, goal)
    assert set(long["table"]) == {"rates", "floods", "rates_result"}
    result = long[long["table"] == "rates_result"].set_index("metric")["median"]
    assert result["saturation_rps"] == pytest.approx(8.0)
    # Constant arrivals to a server of constant times: it follows up to its rate, and the first tokens
    # wait only where requests queue for a slot.
    assert result["followed_rps"] == 8.0
    found = rates.steps(data, goal)
    assert list(found["offered_rps"]) == [2.0, 4.0, 6.0, 7.2, 8.0]
    assert (found["saturated"] == 0.0).all()
    p95 = long[(long["table"] == "rates") & (long["metric"] == "ttft_due_p95_s")]
    assert p95["ci_method"].eq(slo.METHOD).all() and p95["ci_level"].notna().all()
    lines = rates.conclusion(data, goal)
    assert lines[0].startswith("Saturation rate: 8 requests/s, answered with 4 in flight (flood-4)")
    assert lines[1] == "The server followed every rate offered, up to 8 requests/s."
    met = found[found["outcome"] == slo.MEETS]["offered_rps"].max()
    assert lines[-1].startswith(f"Highest rate that met the SLO (ttft_p95 ≤ 0.3 s, no failed request, each request "
                                f"timed from when it was due): {met:g} requests/s")
    assert result["slo_rate_rps"] == met
    table = rates.format_steps(found)
    assert table.splitlines()[0].split()[:3] == ["rate", "due/s", "achieved/s"] and len(table.splitlines()) == 6


def test_records_without_an_open_loop_have_no_rate_tables():
    rows = [{**Record().to_dict(), "scenario": "chat", "phase": "chat", "ok": True, "ttft_s": 0.1}]
    assert rates.tables(records(rows)).empty and rates.conclusion(records(rows), None) == []


def sweep_run(directory, setup: str, service_s: float, goal: str = "ttft_p95=0.3") -> None:
    """A sweep to saturation against a room of 4 slots, written as a run writes it (requests.csv and
    sweep.jsonl with its SLO)."""
    room = Room(slots=4, service_s=service_s, first_token_s=0.05)
    options = SweepOptions(None, parse("poisson"), seed=2, settle_s=2.0, window_s=10.0, min_requests=20, probe_s=2.0)
    rows = [{**row, "setup": setup} for row in room.run(OpenLoop(Sweep(options), room.now))]
    directory.mkdir(parents=True)
    write_csv(rows, directory / "requests.csv")
    (directory / SWEEP_JSONL).write_text(json.dumps({"event": "sweep", "slo": goal}) + "\n")


def test_a_sweeps_report_has_its_sentences_its_rates_and_both_charts(tmp_path):
    sweep_run(tmp_path / "run", "room", 0.5)
    written = {path.name for path in report.write_report(tmp_path / "run")}
    assert {"rate_latency.png", "pareto.png"} <= written
    summary = (tmp_path / "run" / "summary.md").read_text()
    assert "## Open loop: rates" in summary and "- Saturation rate: 8 requests/s" in summary
    rates = documents.section(documents.blocks_of(summary), "Open loop: rates")
    sentences = documents.lists(rates)[0]
    assert sentences[-1].startswith("Highest rate that met the SLO (ttft_p95 ≤ 0.3 s")  # the last line says it
    table = next(block.cells for block in rates if isinstance(block, Table))
    assert list(table.columns[:4]) == ["row", "offered_rps", "due_rps", "achieved_rps"]
    long = pd.read_csv(tmp_path / "run" / "summary.csv")
    assert {"rates", "floods", "rates_result"} <= set(long["table"])


def test_compare_draws_one_curve_per_setup(tmp_path):
    sweep_run(tmp_path / "fast", "fast", 0.5)
    sweep_run(tmp_path / "slow", "slow", 1.0)
    report.write_compare([tmp_path / "fast", tmp_path / "slow"], None, tmp_path / "out")
    html = (tmp_path / "out" / "compare.html").read_text()
    assert "rate_latency.png" in html and "pareto.png" in html
    compare = (tmp_path / "out" / "compare.md").read_text()
    assert "- A (fast): Saturation rate: 8 requests/s" in compare
    assert "- B (slow): Saturation rate: 4 requests/s" in compare
    long = pd.read_csv(tmp_path / "out" / "compare.csv")
    keys = {"fast": "A", "slow": "B"}
    for chart in (charts.rate_latency_chart(long, keys), charts.pareto_chart(long, keys)):
        spec = charts.spec(chart)
        data = [row for rows in spec["datasets"].values() for row in rows]
        assert {row["key"] for row in data} == {"A", "B"}


def test_every_figure_of_the_rate_tables_is_documented():
    from tests.test_docs import DOCS

    room = Room(slots=2, service_s=0.5)
    options = SweepOptions(None, parse("poisson"), settle_s=1.0, window_s=3.0, min_requests=5, probe_s=1.0)
    long = rates.tables(records(room.run(OpenLoop(Sweep(options), room.now))), slo.parse("ttft_p95=1"))
    documented = set(re.findall(r"`([a-z_0-9.]+)`", DOCS))
    missing = sorted((set(long["metric"]) | set(long["table"])) - documented)
    assert not missing, f"figures of the rate tables missing from the docs: {missing}"
