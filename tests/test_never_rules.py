"""The design's never-rules, read from the imports of every module (ast: what a module names, wherever in it)."""

from __future__ import annotations

import ast

import pytest

from tests.conftest import ROOT

CLIENT = {"bench_tasks", "locustfiles", "analysis", "llm_bench"}
RULES = [  # (package, what it never imports, why)
    ("bench_tasks", {"locust", "gevent", "pandas"}, "stdlib-only pure logic (+ orjson, sseclient-py)"),
    ("analysis", {"locust", "gevent"}, "DataFrame -> DataFrame, far from the measuring process"),
    ("llm_bench", {"locust", "gevent"}, "Locust runs in a process of its own: its patching never reaches the CLI"),
    ("simengine", CLIENT, "the simulated engine knows the truth, and nothing of the client that is held to it"),
    ("bench_tasks", {"analysis"}, "measuring code never reads the analysis"),
    ("locustfiles", {"analysis"}, "measuring code never reads the analysis (the report runs in its own process)"),
]


def names_imported(source: str, package: str) -> set[str]:
    """The top-level names of the modules ``source`` imports, at its top or inside a function; a relative
    import is ``package``'s own."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(package if node.level else node.module.split(".")[0])
    return names


def imported(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules it imports."""
    return {str(path.relative_to(ROOT)): names_imported(path.read_text(encoding="utf-8"), package)
            for path in sorted((ROOT / package).rglob("*.py"))}


@pytest.mark.parametrize("package, never, why", RULES, ids=[f"{p}-{'-'.join(sorted(n))}" for p, n, _ in RULES])
def test_a_package_never_imports_what_the_design_forbids(package, never, why):
    modules = imported(package)
    assert modules, f"no module found under {package}/"
    broken = {module: sorted(names & never) for module, names in modules.items() if names & never}
    assert not broken, f"{package} never imports {sorted(never)} ({why}): {broken}"


def test_an_import_is_seen_wherever_it_is():
    source = "import os.path\nfrom . import sibling\ndef late():\n    from gevent import sleep\n    import locust.env\n"
    assert names_imported(source, "simengine") == {"os", "simengine", "gevent", "locust"}


def modules_named(path) -> set[str]:
    """The dotted names of the modules a file imports: ``from a.b import c`` names a.b and a.b.c."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


MODULE_RULES = [  # (module, the prefix of what it never imports, what it may import under it, why)
    ("bench_tasks/stream.py", "bench_tasks.formatting", (), "the SSE decoder writes no text"),
    ("bench_tasks/options.py", "bench_tasks.capacity", ("bench_tasks.capacity.search_options",),
     "the command line parses the search's flags without importing the search"),
    ("bench_tasks/slo.py", "bench_tasks.capacity", (), "the SLO judges any load step: a sweep's too"),
    ("bench_tasks/statistics.py", "bench_tasks", (), "the small statistics are a leaf: anything may use them"),
    ("bench_tasks/formatting.py", "bench_tasks", ("bench_tasks.figures",),
     "formatting is a leaf but for what a missing figure is"),
]


@pytest.mark.parametrize("module, never, allowed, why", MODULE_RULES, ids=[rule[0] for rule in MODULE_RULES])
def test_a_module_imports_only_what_its_place_allows(module, never, allowed, why):
    def under(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    broken = sorted(name for name in modules_named(ROOT / module)
                    if under(name, never) and not any(under(name, fine) for fine in allowed))
    assert not broken, f"{module} imports {broken} ({why})"
