"""The README is the user's reference: every command and every column it can meet is documented."""

from __future__ import annotations

import argparse
import re

from bench_tasks.record import COLUMNS
from llm_bench.cli import build_parser
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_cli_command_is_documented():
    for name in subcommands():
        assert f"llm-bench {name}" in README, f"`llm-bench {name}` is not in README.md"


def test_every_cli_option_is_documented():
    for name, parser in subcommands().items():
        for action in parser._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert flag in README, f"{flag} of `llm-bench {name}` is not in README.md"


def test_every_requests_csv_column_is_documented():
    documented = set(re.findall(r"`([a-z_0-9]+)`", README))
    missing = [c for c in COLUMNS if c not in documented]
    assert not missing, f"columns of requests.csv missing from README.md: {missing}"


def test_every_capacity_figure_and_slo_goal_is_documented():
    import pandas as pd

    from analysis import capacity, load
    from bench_tasks import slo

    documented = set(re.findall(r"`([a-z_0-9.]+)`", README))
    goal = slo.parse("ttft_p95=1.0,decode_p5=10")
    rows = [{**{c: "" for c in COLUMNS}, "scenario": "classroom", "phase": "class-2", "ok": "True", "ttft_s": "0.1",
             "decode_tps": "20", "t_start": "1"}]
    long = capacity.tables(load.typed(pd.DataFrame(rows, columns=list(COLUMNS))), goal)
    metrics = set(long["metric"]) | set(long["table"]) | set(slo.GOAL_COLUMNS) | {"errors"}
    missing = sorted(metrics - documented)
    assert not missing, f"capacity figures or SLO goals missing from README.md: {missing}"
