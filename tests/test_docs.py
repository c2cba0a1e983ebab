"""The documentation is the user's reference: every command, option and column a user can meet is in the
README or docs/, the README stays a short guide, and every fact the code cites lives in the repository."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest
from locust.argument_parser import get_empty_argument_parser, setup_parser_arguments

import simengine.config
from bench_tasks.record import COLUMNS
from llm_bench.cli import build_parser
from locustfiles import llm_run
from tests.conftest import ROOT

README_MAX_LINES = 250
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCS = "\n".join(path.read_text() for path in DOC_FILES)
INTERNAL_OPTIONS = {"--parent-pid"}  # the simulated engine's "exit with the process that started me"

# A citation of a documentation file, in code, configs, tests or docs: docs/NAME.md, with an anchor or not.
# Upper case is a placeholder ("docs/NAME.md#ANCHOR" is how the docs speak of citations), not a citation.
CITATION = re.compile(r"(?<![\w./-])docs/([\w-]+\.md)(?:#([\w-]+))?")
# A relative Markdown link in the README or docs/ (the file, then the anchor).
LINK = re.compile(r"\]\((?!https?:|mailto:)([^)\s#]*)(?:#([^)\s]+))?\)")
ANCHOR_ID = re.compile(r"<a id=\"([\w-]+)\"></a>")
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.M)
# Built so that this file does not cite them itself.
OUTSIDE = ("shared" + "/facts", "../" + "shared/")


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def long_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings
            if flag.startswith("--") and flag != "--help"}


def locust_options() -> set[str]:
    """The options llm-bench adds to Locust's parser (llm_run.add_options, what the runnable locustfiles add)."""
    def flags(with_ours: bool) -> set[str]:
        parser = get_empty_argument_parser()
        setup_parser_arguments(parser)
        if with_ours:
            llm_run.add_options(parser)
        return {f for a in parser._actions for f in a.option_strings}
    return flags(True) - flags(False)


def test_the_readme_guides_in_at_most_250_lines():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


def test_every_cli_command_is_documented():
    for name in subcommands():
        assert f"llm-bench {name}" in DOCS, f"`llm-bench {name}` is in neither README.md nor docs/"


def test_every_cli_option_is_documented():
    for name, parser in subcommands().items():
        for flag in long_flags(parser):
            assert flag in DOCS, f"{flag} of `llm-bench {name}` is in neither README.md nor docs/"


def test_every_option_of_the_simulated_engine_is_documented():
    missing = sorted(long_flags(simengine.config.build_parser()) - INTERNAL_OPTIONS - set(re.findall(r"--[\w-]+", DOCS)))
    assert not missing, f"`llm-bench sim` options missing from the docs: {missing}"


def test_every_option_llm_bench_adds_to_locust_is_documented():
    ours = locust_options()
    assert "--sizes" in ours  # the listing works
    missing = sorted(ours - set(re.findall(r"--[\w-]+", DOCS)))
    assert not missing, f"Locust options of llm-bench missing from the docs: {missing}"


def test_every_requests_csv_column_is_documented():
    documented = set(re.findall(r"`([a-z_0-9]+)`", DOCS))
    missing = [c for c in COLUMNS if c not in documented]
    assert not missing, f"columns of requests.csv missing from the docs: {missing}"


def test_every_capacity_figure_and_slo_goal_is_documented():
    import pandas as pd

    from analysis import capacity, load
    from bench_tasks import slo

    documented = set(re.findall(r"`([a-z_0-9.]+)`", DOCS))
    goal = slo.parse("ttft_p95=1.0,decode_p5=10")
    rows = [{**{c: "" for c in COLUMNS}, "scenario": "classroom", "phase": "class-2", "ok": "True", "ttft_s": "0.1",
             "decode_tps": "20", "t_start": "1"}]
    long = capacity.tables(load.typed(pd.DataFrame(rows, columns=list(COLUMNS))), goal)
    metrics = set(long["metric"]) | set(long["table"]) | set(slo.GOAL_COLUMNS) | {"errors"}
    missing = sorted(metrics - documented)
    assert not missing, f"capacity figures or SLO goals missing from the docs: {missing}"


def repository_files() -> list[Path]:
    """The repository's files as a clone has them (tracked and new, never .venv or results)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    return [ROOT / name for name in listed if name and (ROOT / name).is_file()]


def text_of(path: Path) -> str | None:
    try:
        return path.read_text()
    except (UnicodeDecodeError, OSError):
        return None


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found = set(ANCHOR_ID.findall(markdown))
    seen: dict[str, int] = {}
    for heading in HEADING.findall(re.sub(r"```.*?```", "", markdown, flags=re.S)):
        slug = github_slug(heading)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def citations() -> list[tuple[str, Path, str | None]]:
    """(where, cited file, cited anchor or None) for every citation of a documentation file."""
    cited = []
    for path in repository_files():
        text = text_of(path)
        if text is None or path == Path(__file__).resolve():  # this file's examples are not citations
            continue
        where = str(path.relative_to(ROOT))
        cited += [(where, ROOT / "docs" / name, anchor) for name, anchor in CITATION.findall(text)
                  if not name[:-3].isupper() and not anchor.isupper()]
        if path.suffix == ".md":
            for target, anchor in LINK.findall(text):
                cited.append((where, (path.parent / target).resolve() if target else path, anchor or None))
    return cited


def test_the_citation_finder_sees_what_it_must():
    assert CITATION.findall("see docs/engines.md#vllm-usage-per-event, or docs/reference.md.") == [
        ("engines.md", "vllm-usage-per-event"), ("reference.md", "")]
    assert LINK.findall("[a](docs/x.md#y) [b](#z) [c](https://e.org/#q)") == [("docs/x.md", "y"), ("", "z")]
    assert anchors('# The SLO\n<a id="llamacpp-timings"></a>x\n## requests.csv: one row\n## The SLO\n') == {
        "the-slo", "llamacpp-timings", "requestscsv-one-row", "the-slo-1"}
    assert github_slug("The simulated engine's options (`llm-bench sim`)") == "the-simulated-engines-options-llm-bench-sim"


def test_every_cited_documentation_file_and_anchor_exists():
    cited = citations()
    assert any(where.startswith("configs/engines/") for where, _, _ in cited)  # the profiles cite their facts
    known: dict[Path, set[str]] = {}
    broken = []
    for where, target, anchor in cited:
        if not target.is_file():
            broken.append(f"{where}: {target.relative_to(ROOT)} does not exist")
            continue
        if anchor:
            if target not in known:
                known[target] = anchors(target.read_text())
            if anchor not in known[target]:
                broken.append(f"{where}: {target.relative_to(ROOT)} has no anchor #{anchor}")
    assert not broken, "\n".join(sorted(set(broken)))


@pytest.mark.parametrize("outside", OUTSIDE)
def test_no_file_cites_what_a_clone_does_not_have(outside):
    citing = [str(path.relative_to(ROOT)) for path in repository_files() if outside in (text_of(path) or "")]
    assert not citing, f"these cite {outside}, which no clone of the project contains: {citing}"


def test_the_error_table_lists_every_error_class_the_client_records():
    from bench_tasks import errors

    table = DOCS.split("| error | what happened |", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `([a-z_<>]+)` \|", table, flags=re.MULTILINE)
    assert sorted(listed) == sorted(errors.CLASSES)
