"""A run that failed: what was raised, where, during what, kept as ``failure.json`` and ``failure.txt``.

The first failure of a run ends it (locustfiles/failure.py writes these two files into --out);
the command line prints it in one line and exits ``EXIT_CODE``; the report opens its warnings
with it. ``where`` is the innermost frame of llm-bench's own code or of a user's locustfile (not of
the standard library or a third-party package), so it points at the code to look at.
"""

from __future__ import annotations

import json
import sysconfig
import time
import traceback
from pathlib import Path
from types import FrameType, TracebackType

FAILURE_JSON, FAILURE_TXT = "failure.json", "failure.txt"
EXIT_CODE = 3  # the CLI's 1 is --fail-on-error, 2 a command that could not start; Locust uses 1 and 2
OUR_PACKAGES = ("bench_tasks", "locustfiles", "analysis", "llm_bench", "simengine", "configs")
CAUSE_CHARS = 300
_LIBRARY_DIRS = tuple(dict.fromkeys(
    str(Path(sysconfig.get_paths()[key]).resolve()) for key in ("stdlib", "platstdlib", "purelib", "platlib")))


def describe(error: BaseException, during: str, tb: TracebackType | None = None) -> dict:
    """The failure as the files and the messages carry it (plain values: it also travels from a
    worker to the master)."""
    tb = tb if tb is not None else error.__traceback__
    return {"cause": cause(error), "where": where(tb), "during": during, "t": time.time(),
            "text": "".join(traceback.format_exception(type(error), error, tb))}


def cause(error: BaseException) -> str:
    text = " ".join(str(error).split())
    line = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return line if len(line) <= CAUSE_CHARS else line[: CAUSE_CHARS - 3] + "..."


def where(tb: TracebackType | None) -> str:
    """``package/module.py:LINE in FUNCTION`` of the innermost frame that is ours (or the user's),
    else of the innermost frame."""
    frames = list(traceback.walk_tb(tb))
    if not frames:
        return "unknown"
    frame, line = next((f for f in reversed(frames) if is_ours(f[0])), frames[-1])
    return f"{_shown_path(frame)}:{line} in {frame.f_code.co_name}"


def is_ours(frame: FrameType) -> bool:
    """llm-bench's own code wherever it is installed, or code outside the Python installation and its
    packages (a user's locustfile)."""
    module = str(frame.f_globals.get("__name__", ""))
    if module.split(".")[0] in OUR_PACKAGES:
        return True
    filename = frame.f_code.co_filename
    if filename.startswith("<"):
        return False
    return not str(Path(filename).resolve()).startswith(_LIBRARY_DIRS)


def passes_through_ours(tb: TracebackType | None) -> bool:
    return any(is_ours(frame) for frame, _line in traceback.walk_tb(tb))


def _shown_path(frame: FrameType) -> str:
    """The file as its module names it (``bench_tasks/engine.py``), wherever it is installed; a file
    loaded by path (a locustfile) as its path."""
    filename = Path(frame.f_code.co_filename)
    parts = str(frame.f_globals.get("__name__", "")).split(".")
    if filename.stem == "__init__":
        return "/".join([*parts, filename.name])
    if len(parts) > 1 and parts[-1] == filename.stem:
        return "/".join([*parts[:-1], filename.name])
    return str(filename)


def line(failure: dict, traceback_at: str | Path) -> str:
    """The failure in one line: cause (where, during what); where the whole traceback is."""
    return (f"the run failed: {failure.get('cause', '?')} ({failure.get('where', '?')}, "
            f"during {failure.get('during', '?')}); traceback in {traceback_at}")


def write(directory: Path, failure: dict) -> Path:
    """``failure.txt`` (the whole traceback) and ``failure.json`` (the rest, naming it); returns the
    traceback's path. Each file is written whole or not at all."""
    directory.mkdir(parents=True, exist_ok=True)
    text_path = directory / FAILURE_TXT
    _replace(text_path, f"{line(failure, FAILURE_TXT)}\n\n{failure.get('text', '')}")
    fields = {key: value for key, value in failure.items() if key != "text"}
    _replace(directory / FAILURE_JSON, json.dumps({**fields, "traceback": FAILURE_TXT}, indent=2) + "\n")
    return text_path


def read(directory: Path) -> dict | None:
    """The run's failure (``failure.json``), or None when it did not fail."""
    path = Path(directory) / FAILURE_JSON
    try:
        failure = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"cause": f"{FAILURE_JSON} cannot be read ({exc})", "where": str(path), "during": "the run"}
    return failure if isinstance(failure, dict) else {"cause": f"{FAILURE_JSON} is not an object",
                                                      "where": str(path), "during": "the run"}


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
