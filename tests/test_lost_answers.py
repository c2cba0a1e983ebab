"""A capacity search that loses an answer in a judged window still ends, within a minute of its last overdue
answer: the engine never answers one question, or a worker dies with its students' questions, with
``--processes 2`` and with a master and two workers (tests/benchmarks/lost_answers.py runs 20 of each)."""

from __future__ import annotations

import pandas as pd
import pytest

from bench_tasks.records_file import read_jsonl
from tests.benchmarks.lost_answers import run_search
from tests.conftest import load_records

pytestmark = pytest.mark.slow  # a short capacity search each: about a minute


# Each fault in each room once, in the first window (a hung question makes class 2 miss: the class then
# shrinks to 1, its students stopped while their questions may be on the way) or the second.
@pytest.mark.parametrize("fault, room, window", [("hang", "processes", 1), ("hang", "workers", 2),
                                                 ("kill", "processes", 2), ("kill", "workers", 1)])
def test_a_search_that_loses_an_answer_ends(tmp_path, fault, room, window):
    outcome = run_search(fault, room, 1, tmp_path, window_number=window, give_up_s=120)
    assert outcome.injected and outcome.ended and outcome.exit_code == 0, outcome
    # Ended within a minute of when its last answer was overdue (the fault + --read-timeout + the record wait).
    assert outcome.end_delay_s < 60 and outcome.exit_delay_s < 60, outcome
    records = load_records(outcome.out)
    window_rows = records[records["phase"] == outcome.window]
    assert outcome.window_requests == len(window_rows), outcome  # judged on what came, every record of it
    if fault == "hang":
        # The question never answered failed by its read timeout, in the window, and was judged with it.
        assert outcome.window_failed == 1 and outcome.window_overdue == 0, outcome
        assert (window_rows["error"] == "timeout").sum() == 1
    else:
        lost = pd.DataFrame(read_jsonl(f"{outcome.out}/lost-workers.jsonl")[0])
        assert len(lost) == 1 and lost.loc[0, "phase"] in (outcome.window, outcome.window.replace("class", "settle"))
        # The dead worker's questions in flight were closed, not awaited: none overdue, none failed.
        assert outcome.window_overdue == 0 and outcome.window_failed == 0, outcome
