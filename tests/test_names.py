"""Every name the code uses is defined, and nothing is imported for nothing (pyflakes over every module).

A merge once left a call to a function that had moved into a class: the first connection a server closed
raised a NameError mid-run. No test took that path; a name check reads every path. A line that imports
on purpose for a side the checker cannot see (a Locust user class a locustfile offers) says so with
``# noqa`` and is not reported."""

from __future__ import annotations

import pytest
from pyflakes.api import checkPath
from pyflakes.reporter import Reporter

from tests.conftest import ROOT

PACKAGES = ("bench_tasks", "analysis", "locustfiles", "llm_bench", "simengine", "tests")


class Findings(Reporter):
    """What pyflakes finds, kept (not printed); a line marked ``# noqa`` is the author's answer to it."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def flake(self, message) -> None:
        line = _source_line(message.filename, message.lineno)
        if "# noqa" not in line:
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text) -> None:
        self.found.append(f"{filename}:{lineno}: {msg}")

    def unexpectedError(self, filename, msg) -> None:
        self.found.append(f"{filename}: {msg}")


def _source_line(path: str, lineno: int) -> str:
    lines = open(path, encoding="utf-8").read().splitlines()
    return lines[lineno - 1] if 0 < lineno <= len(lines) else ""


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_is_defined_and_every_import_used(package):
    findings = Findings()
    for path in sorted((ROOT / package).rglob("*.py")):
        checkPath(str(path), findings)
    assert findings.found == []


def test_the_check_finds_an_undefined_name(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("def resend(error):\n    return closed_before_response(error)\n")
    findings = Findings()
    checkPath(str(broken), findings)
    assert len(findings.found) == 1 and "undefined name 'closed_before_response'" in findings.found[0]
