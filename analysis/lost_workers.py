"""Workers a distributed run lost, in words: which client machine, when, what of its work reached the
master and what did not, and who carried on.

Pure: the records and ``load.load_lost_workers`` (the master's ``lost-workers.jsonl``) in, a DataFrame
and sentences out. A worker is named by its ``client_host``, with its process id when that machine ran
several client processes. "Carried the rest of the phase": the other clients that sent records of the
phase that was running after the master noticed the loss (``lost_at``, a few heartbeats after the
worker died); times are wall clock, a label.
"""

from __future__ import annotations

import time

import pandas as pd

from bench_tasks.formatting import MISSING

LOSS_COLUMNS = ["worker", "client", "client_host", "lost_at", "phase", "records_received", "records_finished", "closed",
                "carried_by"]


def losses(records: pd.DataFrame, lost: pd.DataFrame) -> pd.DataFrame:
    """One row per lost worker: ``client`` (its name, empty when no record of it reached the master),
    its ``client_host``, ``lost_at``, ``phase`` (running when it was lost), ``records_received`` of the ``records_finished``
    its finished jobs made, ``closed`` (its work in flight, closed and never recorded: "PHASE round R")
    and ``carried_by`` ({client: records of the phase sent after the loss})."""
    if lost.empty:
        return pd.DataFrame(columns=LOSS_COLUMNS)
    shared = _shared_hosts(records)
    started = pd.to_numeric(records["t_start"], errors="coerce")
    rows = []
    for entry in lost.to_dict("records"):
        host, pid = _text(entry["client_host"]), _integer(entry["client_pid"])
        lost_at = float(entry["lost_at"]) if pd.notna(entry["lost_at"]) else float("nan")
        phase = _text(entry["phase"])
        after = records[(records["phase"] == phase) & (started > lost_at)] if phase else records.iloc[:0]
        others = after[~((after["client_host"] == host) & (pd.to_numeric(after["client_pid"]) == pid))]
        carried = others.groupby([others["client_host"], others["client_pid"]], sort=False).size()
        carried_by: dict[str, int] = {}
        for (other_host, other_pid), count in carried.items():
            name = _name(other_host, _integer(other_pid), shared)
            carried_by[name] = carried_by.get(name, 0) + int(count)
        rows.append({"worker": entry["worker"], "client": _name(host, pid, shared) if host else "",
                     "client_host": host, "lost_at": lost_at, "phase": phase, "records_received": _integer(entry["records_received"]),
                     "records_finished": _integer(entry["records_finished"]),
                     "closed": [_job(job) for job in entry["in_flight"] or []], "carried_by": carried_by})
    return pd.DataFrame(rows, columns=LOSS_COLUMNS, dtype=object)  # counts stay whole, unknown stays None


def sentences(table: pd.DataFrame) -> list[str]:
    """Each lost worker in one sentence, for the report."""
    return [_sentence(row) for row in table.to_dict("records")]


def _sentence(loss: dict) -> str:
    who = f"**{loss['client']}**" if loss["client"] else \
        f"worker {loss['worker']} (no record of it reached the master: its machine is unknown)"
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(loss["lost_at"])) if pd.notna(loss["lost_at"]) else MISSING
    during = f"during {loss['phase']}" if loss["phase"] else "after the last phase"
    parts = [f"{who} was lost at {when}, {during}", _arrived(loss["records_received"], loss["records_finished"]),
             _closed(loss["closed"])]
    if loss["phase"]:
        parts.append(_carried(loss["carried_by"], loss["phase"]))
    return "; ".join(parts) + "."


def _arrived(received: int | None, finished: int | None) -> str:
    if received is None or finished is None:
        return "how many of its records arrived is not known"
    text = f"{received} of the {finished} measured records its finished jobs made reached the master"
    if finished > received:
        text += (f" ({finished - received} may be missing from the records; its own worker-*.jsonl holds them "
                 "if its disk survived)")
    return text


def _closed(jobs: list[str]) -> str:
    if not jobs:
        return "it had nothing in flight"
    return (f"{len(jobs)} of its jobs in flight {'was' if len(jobs) == 1 else 'were'} closed and never recorded: "
            + ", ".join(jobs))


def _carried(carried_by: dict[str, int], phase: str) -> str:
    if not carried_by:
        return f"no other client sent a record of {phase} after the loss"
    names = " and ".join(f"{name} ({count} record{'s' if count != 1 else ''} sent after the loss)"
                         for name, count in carried_by.items())
    return f"{names} carried the rest of {phase}"


def _shared_hosts(records: pd.DataFrame) -> set[str]:
    """Machines that ran several client processes: their processes are told apart by pid."""
    pids = records.groupby("client_host")["client_pid"].nunique()
    return set(pids[pids > 1].index)


def _name(host: str, pid: int | None, shared: set[str]) -> str:
    return f"{host} (pid {pid})" if host in shared and pid is not None else host


def _job(job) -> str:
    """A closed job as "PHASE round R" (older files hold it as text already)."""
    return f"{job['phase']} round {job['round']}" if isinstance(job, dict) else str(job)


def _text(value) -> str:
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def _integer(value) -> int | None:
    number = pd.to_numeric(value, errors="coerce")
    return None if pd.isna(number) else int(number)
