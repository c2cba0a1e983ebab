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


# -- the Locust glue: nothing happens because a module was imported (locustfiles/llm_run.py) --

AT_IMPORT = {"add_listener", "register_message", "install"}  # calls that register on Locust, or set a run up


def calls_at_import(source: str) -> list[str]:
    """The names in AT_IMPORT that ``source`` reaches for when it is imported (``x.y.name(...)`` or a decorator
    ``@x.name``, as ``name``): at its top, in a class body, in a decorator or a default value; not inside a
    function or lambda, which run later."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for at_import in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
                if at_import is not None:
                    visit(at_import)
            return
        if isinstance(node, ast.Lambda):
            return
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in AT_IMPORT:
            found.append(name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def glue_modules() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
            for path in sorted((ROOT / "locustfiles").rglob("*.py"))}


def test_no_module_of_the_glue_keeps_state_in_a_global():
    globals_ = {module: [node.names for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Global)]
                for module, source in glue_modules().items()}
    assert not {module: names for module, names in globals_.items() if names}, \
        "a run's state lives on environment.llm (locustfiles/llm_run.py), never in a module's global"


def test_only_a_runnable_locustfile_registers_anything_at_import_and_by_one_call():
    from locustfiles import RUNNABLE

    registered = {module: calls_at_import(source)
                  for module, source in glue_modules().items()}
    runnable = {f"locustfiles/{name}.py" for name in RUNNABLE}
    assert {module: names for module, names in registered.items() if module not in runnable and names} == {}, \
        "only the runnable locustfiles set a run up at import, by llm_run.install()"
    assert {module: registered[module] for module in runnable} == {module: ["install"] for module in runnable}


def test_a_registration_at_import_is_seen_wherever_it_is():
    source = ("from locust import events\n@events.test_start.add_listener\ndef a(**kw): pass\n"
              "class B:\n    events.init.add_listener(print)\n"
              "def later(x=events.quitting.add_listener(print)):\n    events.test_stop.add_listener(print)\n"
              "handler = lambda: events.init.add_listener(print)\n")
    assert calls_at_import(source) == ["add_listener"] * 3


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
