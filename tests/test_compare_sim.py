"""Two real runs of the simulated engine, one faster: the report and compare tell them apart correctly."""

import pandas as pd

from tests.conftest import run_cli


def test_compare_puts_the_faster_engine_ahead(start_sim, tmp_path):
    dirs = []
    for label, decode_tps in (("slow", 60.0), ("fast", 240.0)):
        sim = start_sim(decode_tps=decode_tps, prefill_tps=20000.0 if label == "slow" else 80000.0)
        out = tmp_path / label
        result = run_cli("quick", "--host", sim.url, "--setup", label, "--only", "chat,prompt,burst", "--runs", "2",
                         "--sizes", "2k", "--bursts", "1,4", "--out", str(out))
        assert result.returncode == 0, result.stderr[-3000:]
        assert (out / "summary.md").exists() and (out / "report.html").exists()  # quick ends with its report
        dirs.append(out)
    result = run_cli("compare", *map(str, dirs), "--out", str(tmp_path / "cmp"))
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("compare.md", "compare.csv", "compare.png", "compare.html"):
        assert (tmp_path / "cmp" / name).exists(), name
    long = pd.read_csv(tmp_path / "cmp" / "compare.csv")

    def figure(setup, table, row, metric):
        match = long[(long.setup == setup) & (long.table == table) & (long.row == row) & (long.metric == metric)]
        assert len(match) == 1, (setup, table, row, metric)
        return match["median"].iloc[0]

    for row in ("burst-1", "burst-4"):
        assert figure("fast", "burst", row, "total_tps") > 3 * figure("slow", "burst", row, "total_tps")
    assert figure("fast", "chat", "chat", "decode_tps") > 3 * figure("slow", "chat", "chat", "decode_tps")
    assert figure("fast", "prompt", "prompt-2k", "ttft_s") < figure("slow", "prompt", "prompt-2k", "ttft_s")
