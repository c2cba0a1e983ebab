"""Locust user classes, shapes and the glue around them.

The runnable locustfiles (``RUNNABLE``) are files at this package's top, found through
``importlib.resources`` so an installed copy gives its own paths (``llm-bench locustfile NAME``;
``locust -f`` needs a file). Each is a thin entry point: it imports its users (``users/``) and its shape
(``shapes/``) and makes the one call that sets a run up (``llm_run.install``); the other modules are the
glue, and importing them changes nothing (docs/locust.md#the-glue-one-run-one-object). Importing this
package imports nothing of Locust: the command line uses it for the paths only.
"""

from __future__ import annotations

import ast
from importlib import resources
from pathlib import Path

# What `locust -f` runs.
RUNNABLE = ("quick_suite", "chat", "paste", "prompt", "agent", "burst", "needle", "classroom", "capacity")


def path(name: str) -> Path:
    """The file of the runnable locustfile ``name`` (``quick_suite`` or ``quick_suite.py``) in this install."""
    stem = name.removesuffix(".py")
    if stem not in RUNNABLE:
        raise LookupError(f"no locustfile {name!r}; choose one of: {', '.join(RUNNABLE)}")
    found = resources.files(__name__).joinpath(f"{stem}.py")
    if not isinstance(found, Path) or not found.is_file():
        # A zipped install has no file to hand to Locust; pip and pipx always unpack.
        raise LookupError(f"locustfile {found} is not a file on disk; reinstall llm-bench with pip or pipx")
    return found


def summary(name: str) -> str:
    """The first sentence of a runnable locustfile's docstring (read, not imported: no Locust here)."""
    docstring = ast.get_docstring(ast.parse(path(name).read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    return paragraph.split(". ")[0].removesuffix(".")
