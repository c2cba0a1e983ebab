"""Benchmark (not a test): `llm-bench report` and `llm-bench compare` on 10k, 100k and 300k records.

    .venv/bin/python tests/benchmarks/report_scale.py [--work DIR] [--sizes 10000,100000,300000]
                                                      [--repeat 3] [--forms csv,jsonl] [--only report,compare]

What it does:

1. Once (kept in ``WORK/source-quick`` and ``WORK/source-capacity``, reused when present): a real quick
   run and a short capacity search against the built-in simulated engine (``llm-bench quick --out ...``,
   ``llm-bench capacity ... --out ...``, about two minutes together).
2. For each size N, a synthetic run directory of N records: the quick run's records and the search's
   (classroom) records, repeated copy after copy as a classroom afternoon would add them, each copy's
   ``round`` renumbered after the last copy's and its clocks (``t_start``, ``t_send``) moved on by the
   source's span; the source's ``metrics.jsonl``, ``capacity.jsonl`` and ``settings.json`` beside them.
   ``csv``: a finished run (``requests.csv``); ``jsonl``: a killed one (``records.jsonl`` only, read
   line by line). For ``compare``, two such directories of N/2 records each (setups ``A`` and ``B``),
   so every line of the table reads N records.
3. Runs each command ``--repeat`` times in a fresh process and prints, per size and form, the median
   wall time (and min-max), the median CPU time (user + system) and the median peak memory (the
   child's own max RSS; both from ``os.wait4``), plus the size of the HTML page written. Medians: the
   machine is shared and noisy; on a busy one the CPU time says more than the wall time.

The synthetic directories are kept in WORK (default /tmp/llm-bench-report-scale) for opening the reports.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

from bench_tasks.record import COLUMNS
from bench_tasks.records_file import write_csv

ROOT = Path(__file__).resolve().parents[2]

CLI = [sys.executable, "-m", "llm_bench.cli"]
CAPACITY_ARGS = ["--slo", "ttft_p95=0.5", "--think-time", "1-2", "--max-students", "8", "--step-s", "5",
                 "--settle-s", "2", "--min-requests", "10"]
SIDE_FILES = ("metrics.jsonl", "settings.json")


def sources(work: Path) -> tuple[list[dict], list[dict], Path, Path]:
    """The quick run's and the search's records (made once), and their directories."""
    quick, search = work / "source-quick", work / "source-capacity"
    for directory, command in ((quick, ["quick"]), (search, ["capacity", *CAPACITY_ARGS])):
        if not (directory / "records.jsonl").exists():
            print(f"making {directory} ...", flush=True)
            subprocess.run([*CLI, *command, "--out", str(directory)], check=True, cwd=ROOT,
                           stdout=subprocess.DEVNULL)
    return _rows(quick / "records.jsonl"), _rows(search / "records.jsonl"), quick, search


def _rows(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def repeated(source: list[dict], count: int, setup: str) -> list[dict]:
    """``count`` records: copies of ``source``, each copy's rounds after the last one's, its clocks later."""
    last_round = max((r["round"] or 0) for r in source) or 1
    starts = [r["t_start"] for r in source if r["t_start"]]
    sends = [r["t_send"] for r in source if r["t_send"] is not None]
    span_s = max(max(starts) - min(starts), max(sends) - min(sends)) + 1.0
    rows = []
    for i in range(count):
        copy, row = divmod(i, len(source))
        record = dict(source[row])
        if record["round"] is not None:
            record["round"] = record["round"] + copy * last_round
        if record["t_start"]:
            record["t_start"] = record["t_start"] + copy * span_s
        if record["t_send"] is not None:
            record["t_send"] = record["t_send"] + copy * span_s
        record["setup"] = setup
        rows.append(record)
    return rows


def synthetic_run(directory: Path, records: int, quick: list[dict], search: list[dict], quick_dir: Path,
                  search_dir: Path, setup: str, form: str) -> Path:
    """A run directory of ``records`` records, in the proportion of the two sources."""
    if directory.exists():
        return directory
    directory.mkdir(parents=True)
    from_search = records * len(search) // (len(quick) + len(search))
    rows = repeated(quick, records - from_search, setup) + repeated(search, from_search, setup)
    if form == "csv":
        write_csv(rows, directory / "requests.csv")
    else:
        with open(directory / "records.jsonl", "wb") as f:
            f.writelines(orjson.dumps({c: r[c] for c in COLUMNS}) + b"\n" for r in rows)
    for name in SIDE_FILES:
        shutil.copy(quick_dir / name, directory / name)
    shutil.copy(search_dir / "capacity.jsonl", directory / "capacity.jsonl")
    return directory


def timed(command: list[str]) -> tuple[float, float, float, bool]:
    """Wall seconds, CPU seconds (user + system), peak memory (MiB, the process's own max RSS) and
    success of one run of ``command``."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall_s = time.perf_counter() - started
    if status != 0:
        lines = process.stderr.read().decode().strip().splitlines()
        error = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "")
        print(f"FAILED ({status}) after {wall_s:.1f} s: {' '.join(command)}: {error}", flush=True)
    return wall_s, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, status == 0  # maxrss: KiB


def measure(command: list[str], repeat: int) -> str:
    runs = [timed(command) for _ in range(repeat)]
    walls, cpus, peaks = ([run[i] for run in runs] for i in range(3))
    failed = sum(1 for *_, ok in runs if not ok)
    return (f"{statistics.median(walls):7.1f} s ({min(walls):.1f}-{max(walls):.1f})  {statistics.median(cpus):6.1f} s"
            f"  {statistics.median(peaks):6.0f} MiB" + (f"  {failed} of {repeat} FAILED" if failed else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/llm-bench-report-scale"))
    parser.add_argument("--sizes", default="10000,100000,300000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--forms", default="csv,jsonl", help="csv (a finished run), jsonl (a killed run)")
    parser.add_argument("--only", default="report,compare")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    quick, search, quick_dir, search_dir = sources(args.work)
    print(f"sources: {len(quick)} quick-run records, {len(search)} capacity-search records", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    print(f"{'command':<8}{'form':<7}{'records':>9}  {'wall (median, min-max)':<24}{'cpu':>8}{'peak':>11}  html")
    for size in (int(s) for s in args.sizes.split(",")):
        for form in args.forms.split(","):
            if "report" in args.only:
                run = synthetic_run(args.work / f"{form}-{size}", size, quick, search, quick_dir, search_dir,
                                    "", form)
                line = measure([*CLI, "report", str(run)], args.repeat)
                print(f"{'report':<8}{form:<7}{size:>9}  {line}  {_size(run / 'report.html')}", flush=True)
            if "compare" in args.only:
                pair = [synthetic_run(args.work / f"{form}-{size}-{key}", size // 2, quick, search, quick_dir,
                                      search_dir, key, form) for key in ("A", "B")]
                out = args.work / f"{form}-{size}-compare"
                line = measure([*CLI, "compare", *map(str, pair), "--out", str(out)], args.repeat)
                print(f"{'compare':<8}{form:<7}{size:>9}  {line}  {_size(out / 'compare.html')}", flush=True)
    return 0


def _size(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB" if path.exists() else "-"


if __name__ == "__main__":
    sys.exit(main())
