"""A distributed run whose master was lost, in words: what the report is made of, what only the master
knew and is therefore unknown, and what the records still say.

A master that dies (kill -9, a laptop's lid closed) leaves no requests.csv. Its workers kept every record
they finished in their own ``worker-HOST-PID.jsonl``; the master alone kept the rest
(``records_file.MASTER_FILES``): which records reached it, the suite's plan and each phase's opening
(``progress.jsonl``), the engine's counters between phases and its gauges every second
(``metrics.jsonl``, ``engine_series.jsonl``), the workers it lost (``lost-workers.jsonl``), the run's
failure (``failure.json``), a search's or a sweep's SLO and verdicts, the run's settings. Whichever of
them is here (the master's directory given with the workers' files) is used and said.

Pure: the records, ``load.load_run``'s info, the names of the master's files present, the plan
(``load.load_progress``) and the engine's counter readings (``load.load_metrics``) in; a ``Statement``
(or None: the master was not lost) out. Times are wall clock, a label.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pandas as pd

from analysis.records import measured
from bench_tasks.formatting import MISSING
from bench_tasks.records_file import (CAPACITY_JSONL, ENGINE_SERIES_JSONL, LOST_WORKERS_JSONL, METRICS_JSONL,
                                      PROGRESS_JSONL, RECORDS_JSONL, SETTINGS_JSON, SWEEP_JSONL)
from bench_tasks.run_failure import FAILURE_JSON

LABEL = "Incomplete run: the master was lost"
KNOWN_LABEL = "What the records still say"


@dataclass(frozen=True)
class Statement:
    said: str  # what the report is made of, ending on what follows: what only the master knew
    unknown: tuple[str, ...]
    known: tuple[str, ...]

    def lines(self) -> list[str]:
        """The statement for the terminal."""
        lines = [f"the master was lost: {self.said}", *(f"  - {item}" for item in self.unknown),
                 f"{KNOWN_LABEL.lower()}:", *(f"  - {item}" for item in self.known)]
        return [line.replace("**", "") for line in lines]  # bold is the report's; the terminal shows text


def statement(records: pd.DataFrame, info: dict, present: frozenset[str], plan: dict | None,
              metrics: pd.DataFrame) -> Statement | None:
    """What a run whose master was lost can and cannot say; None when the master was not lost: the run
    finished (requests.csv), or its records are a local run's (no worker's file, no worker's record)."""
    from_workers = info["only_in_workers"] is not None or records["clock_offset_s"].notna().any()
    if info["complete"] or not from_workers:
        return None
    unknown = [*_unknown_workers(records, info, present), *_unknown_phases(records, plan),
               *_unknown_engine(records, present, metrics), *_unknown_judgement(records, present)]
    unknown.append("a request still streaming when its worker stopped: a worker gives up on a lost master 60 s "
                   "after its last heartbeat (or stops on Ctrl-C) and lets a request finish only within the master's "
                   "`--stop-timeout`; one it cut is in no file")
    if not present:
        unknown += [f"whether the run failed before the master was lost ({FAILURE_JSON})",
                    f"the run's settings ({SETTINGS_JSON}: the command line and what the server said about "
                    "itself, when llm-bench started the run)"]
    return Statement(_said(info, present), tuple(unknown), tuple(_known(records, plan)))


def _said(info: dict, present: frozenset[str]) -> str:
    workers = _worker_files(info)
    one = len(workers) == 1
    names = ", ".join(f"`{name}`" for name in workers)
    files = f"worker's own file ({names})" if one else f"workers' own files ({len(workers)}: {names})"
    if RECORDS_JSONL not in present:
        where = "none of the master's files is here" if not present else \
            "the master's files here hold no record (none had reached it)"
        return (f"the report is made from the {files}, which {'holds' if one else 'hold'} every request "
                f"{'its' if one else 'each'} worker finished (those not yet reported to the master included); "
                f"{where} (the master was lost, or its directory was not given), so it does not know what only the "
                "master kept:")
    lead = "the master wrote no requests.csv (it was lost, or is still running)"
    if not workers:
        return (f"{lead} and no worker's own file is here: the report holds the {_records(info['from_master'])} "
                "that reached the master. It does not know:")
    return (f"{lead}; the report is made from its `{RECORDS_JSONL}` ({_records(info['from_master'])}) and the {files}, "
            f"each record counted once: {info['only_in_workers']} of them never reached the master. What only "
            "the master kept is lost with it:")


def _unknown_workers(records: pd.DataFrame, info: dict, present: frozenset[str]) -> list[str]:
    if RECORDS_JSONL in present and not _worker_files(info):
        return ["the records each worker finished after its last report to the master (a worker reports every 3 s) "
                "and after the loss: they are in each worker's own `worker-HOST-PID.jsonl`; add them: "
                "`llm-bench report DIR WORKER_FILES... --out DIR`"]
    if RECORDS_JSONL in present:
        return [f"the records of **{name}** that never reached the master: its own file (`{file}`) is not here"
                for name, file in _clients(records).items() if file not in info["files"]]
    said = ["how many workers the run had: a worker whose file is not here left no trace in this report"]
    if not present:  # with the master's directory, no lost-workers.jsonl means that it lost none
        said.append(f"which workers were lost before the master, and their jobs in flight then "
                    f"({LOST_WORKERS_JSONL}): a worker whose records stop early may have died, or sat idle")
    return said


def _unknown_phases(records: pd.DataFrame, plan: dict | None) -> list[str]:
    if plan is not None:
        return []  # the master's progress is here: what it planned and began is known
    last = _last_phase(records)
    if last is None:
        return [f"which phases were complete ({PROGRESS_JSONL}, the master's plan): no measured request is here"]
    return [f"which phases were complete: the plan and each phase's opening are in the master's {PROGRESS_JSONL}. "
            f"The records end during **{last}**, which the loss may have cut short; a phase planned after it "
            "never began"]


def _unknown_engine(records: pd.DataFrame, present: frozenset[str], metrics: pd.DataFrame) -> list[str]:
    said = []
    if METRICS_JSONL not in present:
        said.append(f"the engine's counters, read before and after each phase ({METRICS_JSONL}): the tables have "
                    "no engine figures")
    else:
        read = metrics.groupby("phase", sort=False)["when"].agg(set)
        cut = [phase for phase, whens in read.items() if "before" in whens and "after" not in whens]
        if cut:
            said.append(f"the engine's counters after {', '.join(f'**{p}**' for p in cut)} (the master read "
                        "them before it only): no engine figures for it")
    if ENGINE_SERIES_JSONL not in present:
        said.append(f"the engine's queue and KV cache, read every second ({ENGINE_SERIES_JSONL}): the timeline "
                    "has no engine panel")
    return said


def _unknown_judgement(records: pd.DataFrame, present: frozenset[str]) -> list[str]:
    said = []
    search = records["phase"].str.startswith("class-") | (records["scenario"] == "probe")
    if search.any() and CAPACITY_JSONL not in present:
        said.append(f"the capacity search's SLO, options and verdicts ({CAPACITY_JSONL}): its steps are not "
                    "judged here")
    if records["offered_rps"].notna().any() and SWEEP_JSONL not in present:
        said.append(f"the sweep's SLO ({SWEEP_JSONL}): its rates are not judged against it")
    return said


def _known(records: pd.DataFrame, plan: dict | None) -> list[str]:
    said = []
    if plan is not None and plan["phases"]:
        said.append(_plan_sentence(records, plan))
    finished = pd.to_numeric(records["t_start"], errors="coerce") + \
        pd.to_numeric(records["e2e_s"], errors="coerce").fillna(0.0)
    for name, mine in records.groupby(_client_names(records), sort=False):
        phases = ", ".join(dict.fromkeys(measured(mine)["phase"])) or "warm-ups only"
        last = finished[mine.index].max()
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last)) if pd.notna(last) and last > 0 else MISSING
        said.append(f"**{name}**: {_records(len(mine))} ({phases}), the last finished at {when}")
    return said


def _plan_sentence(records: pd.DataFrame, plan: dict) -> str:
    counts = measured(records).groupby("phase").size()
    complete, cut, never = [], [], []
    for phase, expected in plan["phases"]:
        have = int(counts.get(phase, 0))
        if have >= expected:
            complete.append(f"{phase} ({have} of {expected} records)")
        elif phase in plan["opened"] or have:
            cut.append(f"{phase} ({have} of {expected} records)")
        else:
            never.append(phase)
    parts = [f"{title}: {', '.join(items)}" for title, items in
             (("complete", complete), ("cut short", cut), ("never began", never)) if items]
    return f"the plan ({PROGRESS_JSONL}): " + "; ".join(parts)


def _last_phase(records: pd.DataFrame) -> str | None:
    """The measured phase of the last request sent, on the master's clock (t_send + clock_offset_s)."""
    mine = measured(records)
    sent = pd.to_numeric(mine["t_send"], errors="coerce") + pd.to_numeric(mine["clock_offset_s"],
                                                                         errors="coerce").fillna(0.0)
    return None if sent.dropna().empty else str(mine.loc[sent.idxmax(), "phase"])


def _client_names(records: pd.DataFrame) -> pd.Series:
    """Each record's client: its host and process id."""
    return records["client_host"].astype(str) + " (pid " + records["client_pid"].astype("Int64").astype(str) + ")"


def _clients(records: pd.DataFrame) -> dict[str, str]:
    """Each client's name and the name its own records file has when it is a worker's."""
    pairs = records[["client_host", "client_pid"]].drop_duplicates()
    return {f"{host} (pid {pid})": f"worker-{host}-{pid}.jsonl" for host, pid in pairs.itertuples(index=False)}


def _worker_files(info: dict) -> list[str]:
    return [name for name in info["files"] if name != RECORDS_JSONL]


def _records(count: int) -> str:
    return f"{count} record{'s' if count != 1 else ''}"
