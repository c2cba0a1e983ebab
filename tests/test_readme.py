"""The documentation's commands, run as a new user runs them: every ```bash block of README.md and of
docs/*.md, as written, in a fresh copy of the repository, from its root, with relative paths.

The blocks run in one order: the README's first, in its order (its first block, the set-up command,
makes the virtual environment that every later one uses, as "source .venv/bin/activate" would), then
each file of docs/ in DOC_ORDER. A block marked
``<!-- readme-test: skip (reason) -->`` is not run (the tests' own command; a web UI that waits for a
click; a long search; a real engine); ``<!-- readme-test: together -->`` runs its commands at the same time (a master and its
workers). ``SERVER``, ``MASTER_IP`` and ``N_LAPTOPS`` are the README's placeholders: a simulated
engine started here, this machine, one laptop.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import simengine
from tests.conftest import ROOT, load_records

BLOCK = re.compile(r"(?:<!-- readme-test: (?P<mark>[^>]*?) -->\n)?```bash\n(?P<body>.*?)```", re.S)
COMMAND_TIMEOUT_S = 600  # the set-up command installs the package, then runs the whole suite
# README.md first (its first block sets up), then docs/ in a reader's order; every docs/*.md must be here.
DOC_ORDER = ("README.md", "docs/reference.md", "docs/measurement.md", "docs/engines.md", "docs/classroom.md",
             "docs/accuracy.md", "docs/locust.md", "docs/open-loop.md")


@dataclass(frozen=True)
class Block:
    mark: str
    commands: tuple[str, ...]


def readme_blocks(text: str) -> list[Block]:
    blocks = []
    for match in BLOCK.finditer(text):
        lines = [line.strip() for line in match["body"].splitlines()]
        commands = tuple(line for line in lines if line and not line.startswith("#"))
        blocks.append(Block((match["mark"] or "").strip(), commands))
    return blocks


def documented_blocks(root: Path) -> list[Block]:
    """Every block of the documentation, in the order the test runs them."""
    return [block for name in DOC_ORDER for block in readme_blocks((root / name).read_text())]


def test_every_doc_is_in_the_order_and_every_mark_is_known():
    assert set(DOC_ORDER) == {"README.md"} | {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert readme_blocks((ROOT / "README.md").read_text())[0].commands[0].startswith(
        "python3 -m venv .venv && .venv/bin/pip install -e . &&")
    for block in documented_blocks(ROOT):
        assert block.mark == "" or block.mark == "together" or re.fullmatch(r"skip \(.+\)", block.mark), block


def fresh_copy(destination: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, never .venv or results)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def filled_in(command: str, server_url: str) -> str:
    command = command.replace("http://SERVER:8000", server_url).replace("MASTER_IP", "127.0.0.1")
    command = command.replace("N_LAPTOPS", "1")
    left = re.findall(r"\b[A-Z][A-Z_]{3,}\b", command)
    assert not left, f"a placeholder this test cannot fill in: {left} in {command!r}"
    return command


def user_environment(checkout: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "VIRTUAL_ENV")}
    env["PATH"] = f"{checkout / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # source .venv/bin/activate
    env["VIRTUAL_ENV"] = str(checkout / ".venv")
    return env


def run_block(block: Block, checkout: Path, server_url: str) -> list[str]:
    """Run one block's commands (in turn, or all at once when marked together); returns what each
    printed. A command that fails or prints a traceback fails the test."""
    commands = [filled_in(c, server_url) for c in block.commands]
    groups = [commands] if block.mark == "together" else [[c] for c in commands]
    return [output for group in groups for output in run_together(group, checkout)]


def run_together(commands: list[str], checkout: Path) -> list[str]:
    env = user_environment(checkout)
    running = [subprocess.Popen(["bash", "-c", c], cwd=checkout, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for c in commands]
    outputs = []
    try:
        for command, child in zip(commands, running):
            output, _ = child.communicate(timeout=COMMAND_TIMEOUT_S)
            assert child.returncode == 0, f"{command}\nexited {child.returncode}:\n{output[-4000:]}"
            assert "Traceback" not in output, f"{command}\nprinted a traceback:\n{output[-4000:]}"
            outputs.append(output)
    finally:
        for child in running:
            if child.poll() is None:
                child.kill()
    return outputs


@pytest.mark.slow  # every README command, the quick suite and selftest among them
@pytest.mark.timeout(1500)
def test_every_readme_command_runs_as_written(tmp_path):
    checkout = fresh_copy(tmp_path / "llm-bench")
    # SERVER: a fast simulated engine, so the classroom's full-size suites take seconds, not minutes.
    config = simengine.SimConfig(port=0, slots=12, prefill_tps=1e6, decode_tps=1000.0)
    with simengine.start_process(config) as server:
        outputs = [out for block in documented_blocks(checkout)
                   if not block.mark.startswith("skip") for out in run_block(block, checkout, server.url)]

    results = checkout / "results"
    setup_output = outputs[0]
    assert "phase 1/10 chat" in setup_output and "suite done" in setup_output  # progress, in a pipe
    quick = load_records(results / "quick")
    assert len(quick[quick["scenario"] != "warmup"]) == 93 and quick["ok"].all()
    for name in ("summary.md", "report.html", "requests.csv", "settings.json"):
        assert (results / "quick" / name).stat().st_size > 0, name
    server_run = load_records(results / "server")  # the README's "measure a server", and its comparison
    assert server_run["ok"].all() and (server_run["setup"] == "vLLM 0.32 / Qwen3-8B / RTX 4090").all()
    assert "built-in" in (results / "compared" / "compare.md").read_text()
    room = load_records(results / "room")  # the master's records, and the report it wrote at the end
    assert len(room[room["scenario"] != "warmup"]) == 93 and (results / "room" / "report.html").exists()
    assert (results / "laptop-1" / "summary.md").exists()
    assert "room-a" in (results / "laptops" / "compare.md").read_text()
    capacity = load_records(results / "capacity")
    judged = capacity[capacity["phase"].str.startswith("class-")]  # the short search's judged windows
    assert len(judged) >= 10 and judged["ok"].all() and (results / "capacity" / "capacity.png").exists()
    assert (results / "selftest" / "selftest.csv").exists()
    direct = load_records(results / "direct")  # docs/reference.md: the locustfile run by Locust itself
    assert set(direct.loc[direct["scenario"] != "warmup", "phase"]) == {"chat"} and direct["ok"].all()
    faults = load_records(results / "faults")
    assert (faults.loc[faults["scenario"] == "chat", "error"] == "http_500").all()
    assert not list(checkout.glob("results/*/results"))  # nothing nested under a relative --out
