"""A run's files gathered into one directory for its report: the workers' own records files brought back
from the laptops (``worker-HOST-PID.jsonl``) when the master was lost, and the directories holding them or
the master's files, so that ``llm-bench report PATH... --out DIR`` reports on DIR as on any run directory.

Each file keeps its name: DIR is then a run directory of its own, which ``llm-bench report DIR`` and
``llm-bench compare`` read again, and which holds everything its report was made of. A file already in
DIR is left where it is; another copy of it (the same name) is kept once: the longer, when one is the
start of the other (a worker's file copied mid-run and again at its end). Records found in two files of
different names are counted once by the report (analysis/load.py). DIR may hold another run's records only
when it is named among the paths (the files are then added to that run): never mixed in by surprise.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from bench_tasks.records_file import MASTER_FILES, RECORDS_JSONL, REQUESTS_CSV, WORKER_JSONL_GLOB
from bench_tasks.run_failure import FAILURE_TXT
from llm_bench.headless import UsageError, prepare_report_dir

# What a run directory gives to a gathered one: what its report reads (FAILURE_TXT: what the failure's
# sentence points to).
INPUTS = (*MASTER_FILES, WORKER_JSONL_GLOB, FAILURE_TXT)
BLOCK_BYTES = 1 << 20


def run_directory(paths: list[Path], out: Path | None) -> tuple[Path, list[str]]:
    """The directory to report on, and what was done to make it, a line each. One directory and no ``out``:
    that directory, as ever. Otherwise ``out``, holding every input of ``paths`` (run directories, and
    workers' files)."""
    if out is None:
        if len(paths) == 1 and not paths[0].is_file():
            return paths[0], []  # the report says what is wrong with a directory that is not a run's
        raise UsageError("a worker's file, or several paths, need --out DIR: the directory their report goes to")
    if paths == [out] and out.is_dir():
        return out, []
    files = [_inputs_of(path) for path in paths]
    masters = [path for path, found in zip(paths, files)
               if any(f.name in (RECORDS_JSONL, REQUESTS_CSV) for f in found)]
    if len(masters) > 1:
        raise UsageError(f"{' and '.join(map(str, masters))} each hold a master's records: one run's files only")
    if not any(path == out or out in path.parents for path in paths):
        _check_holds_no_other_run(out, {source.name for found in files for source in found})
    out = prepare_report_dir(str(out))
    copied = len({source.name for found in files for source in found if _copy(source, out)})
    return out, [f"{copied} file{'s' if copied != 1 else ''} copied into {out}"]


def _check_holds_no_other_run(out: Path, names: set[str]) -> None:
    """``out`` holds no records but copies of files given: another run's would be mixed with this one's."""
    held = [path.name for pattern in (RECORDS_JSONL, REQUESTS_CSV, WORKER_JSONL_GLOB) for path in out.glob(pattern)]
    others = sorted(name for name in held if name not in names)
    if others:
        raise UsageError(f"{out} already holds a run's records ({', '.join(others)}): name it among the PATHs to add "
                         "these files to that run, or choose another --out")


def _inputs_of(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted({f for pattern in INPUTS for f in path.glob(pattern) if f.is_file()})
        if not found:
            raise UsageError(f"{path} holds no run's files (requests.csv, records.jsonl or worker-*.jsonl)")
        return found
    if not path.is_file():
        raise UsageError(f"{path}: no such file or directory")
    if not path.match(WORKER_JSONL_GLOB):
        raise UsageError(f"{path} is not a worker's records file (worker-HOST-PID.jsonl, as the worker wrote it); "
                         "give those, or the run directories holding them")
    return [path]


def _copy(source: Path, out: Path) -> bool:
    """Copy ``source`` into ``out`` unless a copy of it is there already; whether it was copied."""
    target = out / source.name
    if target == source:
        return False
    if target.exists():
        if _starts(target, source):  # the same file, or an earlier copy of what is there
            return False
        if not _starts(source, target):
            raise UsageError(f"{source} and {target} are different files of one name: which one is the run's?")
    shutil.copyfile(source, target)
    return True


def _starts(whole: Path, start: Path) -> bool:
    """Whether ``start``'s bytes are the first bytes of ``whole``."""
    if start.stat().st_size > whole.stat().st_size:
        return False
    with open(whole, "rb") as a, open(start, "rb") as b:
        while block := b.read(BLOCK_BYTES):
            if a.read(len(block)) != block:
                return False
    return True
