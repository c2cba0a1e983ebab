"""The documentation's commands, run as a new user runs them: every ```bash block of README.md and of
docs/*.md, as written, in a fresh copy of the repository, from its root, with relative paths.

The README's first block, the set-up command, makes the virtual environment that every later block uses
(as "source .venv/bin/activate" would) and runs the suite into results/quick: it runs once per session,
in one copy shared by every test here (pytest-xdist's workers take turns at a file lock; the first makes
it, the others wait for it). The other blocks run in that copy, in tests that pytest-xdist hands to
different workers: blocks that name the same ``results/`` directory (one reads what the other wrote, or
both write it) run in one test, in the documentation's order (README.md, then docs/ in DOC_ORDER). A block
marked ``<!-- readme-test: skip (reason) -->`` is not run (the tests' own command; a web UI that waits for
a click; a long search; a real engine); ``<!-- readme-test: together -->`` runs its commands at the same
time (a master and its workers). ``SERVER``, ``MASTER_IP`` and ``N_LAPTOPS`` are the README's placeholders:
a simulated engine started here, this machine, one laptop.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import simengine
from tests.conftest import ROOT, load_records
from tests.engines.cache import file_lock

BLOCK = re.compile(r"(?:<!-- readme-test: (?P<mark>[^>]*?) -->\n)?```bash\n(?P<body>.*?)```", re.S)
COMMAND_TIMEOUT_S = 600  # the set-up command installs the package, then runs the whole suite
# README.md first (its first block sets up), then docs/ in a reader's order; every docs/*.md must be here.
DOC_ORDER = ("README.md", "docs/reference.md", "docs/measurement.md", "docs/engines.md", "docs/classroom.md",
             "docs/accuracy.md", "docs/locust.md", "docs/open-loop.md")
RESULTS = re.compile(r"\bresults/[\w.*-]+")


@dataclass(frozen=True)
class Block:
    mark: str
    commands: tuple[str, ...]
    where: str = ""  # "README.md#3": the file and the block's place in it

    def results(self) -> set[str]:
        """The results/ directories the block names (reads or writes)."""
        return {name for command in self.commands for name in RESULTS.findall(command)}


def readme_blocks(text: str, name: str = "") -> list[Block]:
    blocks = []
    for index, match in enumerate(BLOCK.finditer(text)):
        lines = [line.strip() for line in match["body"].splitlines()]
        commands = tuple(line for line in lines if line and not line.startswith("#"))
        blocks.append(Block((match["mark"] or "").strip(), commands, f"{name}#{index}"))
    return blocks


def documented_blocks(root: Path) -> list[Block]:
    """Every block of the documentation, in the documentation's order."""
    return [block for name in DOC_ORDER for block in readme_blocks((root / name).read_text(), name)]


def block_groups(root: Path) -> list[tuple[Block, ...]]:
    """The blocks after the set-up, in groups that share no results/ directory (each group in the
    documentation's order): groups can run at the same time in one copy. What the set-up wrote is there
    before any group starts, and only read."""
    setup, *rest = [block for block in documented_blocks(root) if not block.mark.startswith("skip")]
    groups: list[list[Block]] = []
    for block in rest:
        names = block.results() - setup.results()
        joined = [group for group in groups if any(names & other.results() for other in group)]
        merged = [other for group in joined for other in group] + [block]
        groups = [group for group in groups if group not in joined] + [merged]
    return [tuple(sorted(group, key=rest.index)) for group in sorted(groups, key=lambda g: min(map(rest.index, g)))]


def test_every_doc_is_in_the_order_and_every_mark_is_known():
    assert set(DOC_ORDER) == {"README.md"} | {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert readme_blocks((ROOT / "README.md").read_text())[0].commands[0].startswith(
        "python3 -m venv .venv && .venv/bin/pip install -e . &&")
    for block in documented_blocks(ROOT):
        assert block.mark == "" or block.mark == "together" or re.fullmatch(r"skip \(.+\)", block.mark), block
    # Every check below has its block; the groups keep a block that reads another's output with it.
    named = {name for group in block_groups(ROOT) for block in group for name in block.results()}
    assert set(CHECKS) <= named, set(CHECKS) - named
    group_of = {block.where: group for group in block_groups(ROOT) for block in group}
    assert group_of["README.md#3"] == group_of["README.md#4"]  # the server's run, then its comparison


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


@dataclass(frozen=True)
class SetUp:
    checkout: Path
    output: str  # what the set-up command printed


@pytest.fixture(scope="session")
def set_up(tmp_path_factory) -> SetUp:
    """The fresh copy, set up by the README's first block: made once per session. pytest-xdist's workers
    share it through a file lock in their common base directory; a set-up that failed fails every test
    here at once, with its output."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "readme"
    checkout, done = shared / "llm-bench", shared / "setup.json"
    with file_lock(shared / "setup.lock"):
        if not done.exists():
            fresh_copy(checkout)
            try:
                outcome = {"output": run_block(documented_blocks(checkout)[0], checkout, "")[0]}
            except AssertionError as error:
                outcome = {"failed": str(error)}
            done.write_text(json.dumps(outcome))
    outcome = json.loads(done.read_text())
    if "failed" in outcome:
        pytest.fail(f"the README's set-up command failed:\n{outcome['failed']}")
    return SetUp(checkout, outcome["output"])


def check_quick(results: Path) -> None:
    quick = load_records(results / "quick")
    assert len(quick[quick["scenario"] != "warmup"]) == 93 and quick["ok"].all()
    for name in ("summary.md", "report.html", "requests.csv", "settings.json"):
        assert (results / "quick" / name).stat().st_size > 0, name


def check_server(results: Path) -> None:  # the README's "measure a server"
    server_run = load_records(results / "server")
    assert server_run["ok"].all() and (server_run["setup"] == "vLLM 0.32 / Qwen3-8B / RTX 4090").all()


def check_room(results: Path) -> None:  # the master's records, and the report it wrote at the end
    room = load_records(results / "room")
    assert len(room[room["scenario"] != "warmup"]) == 93 and (results / "room" / "report.html").exists()


def check_capacity(results: Path) -> None:
    capacity = load_records(results / "capacity")
    judged = capacity[capacity["phase"].str.startswith("class-")]  # the short search's judged windows
    assert len(judged) >= 10 and judged["ok"].all() and (results / "capacity" / "capacity.png").exists()


def check_direct(results: Path) -> None:  # docs/reference.md: the locustfile run by Locust itself
    direct = load_records(results / "direct")
    assert set(direct.loc[direct["scenario"] != "warmup", "phase"]) == {"chat"} and direct["ok"].all()


def check_faults(results: Path) -> None:
    faults = load_records(results / "faults")
    assert (faults.loc[faults["scenario"] == "chat", "error"] == "http_500").all()


def check_compared(results: Path) -> None:  # the README's comparison of the two
    assert "built-in" in (results / "compared" / "compare.md").read_text()


def check_laptops(results: Path) -> None:  # each laptop's own suite, its report, all of them together
    assert (results / "laptop-1" / "summary.md").exists()
    assert "room-a" in (results / "laptops" / "compare.md").read_text()


def check_selftest(results: Path) -> None:
    assert (results / "selftest" / "selftest.csv").exists()


# What a results/ directory must hold once the blocks that name it have run.
CHECKS: dict[str, Callable[[Path], None]] = {
    "results/server": check_server, "results/compared": check_compared, "results/room": check_room,
    "results/laptops": check_laptops, "results/capacity": check_capacity, "results/selftest": check_selftest,
    "results/direct": check_direct, "results/faults": check_faults,
}


@pytest.mark.slow  # installs the package in a fresh virtual environment, then runs the quick suite
@pytest.mark.timeout(1200)
def test_the_readme_s_set_up_command_installs_and_runs_the_suite(set_up):
    assert "phase 1/10 chat" in set_up.output and "suite done" in set_up.output  # progress, in a pipe
    check_quick(set_up.checkout / "results")


@pytest.mark.slow  # waits for the set-up (the quick suite), then runs suites, a search, a selftest
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("group", block_groups(ROOT), ids=lambda group: "+".join(b.where for b in group))
def test_every_readme_command_runs_as_written(set_up, group):
    # SERVER: a fast simulated engine, so the classroom's full-size suites take seconds, not minutes.
    config = simengine.SimConfig(port=0, slots=12, prefill_tps=1e6, decode_tps=1000.0)
    with simengine.start_process(config) as server:
        for block in group:
            run_block(block, set_up.checkout, server.url)
    results = set_up.checkout / "results"
    for name in sorted(set().union(*(block.results() for block in group)) & set(CHECKS)):
        CHECKS[name](results)
    assert not list(set_up.checkout.glob("results/*/results"))  # nothing nested under a relative --out
