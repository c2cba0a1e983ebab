"""Cache directory, inter-process file locks and content keys for generated engine artefacts."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path
from typing import Iterator


def cache_root() -> Path:
    """``$LLM_BENCH_CACHE`` or ``~/.cache/llm-bench`` (created)."""
    root = Path(os.environ.get("LLM_BENCH_CACHE") or Path.home() / ".cache" / "llm-bench").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Exclusive flock on PATH (a ``.lock`` file): concurrent test processes build an artefact once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def content_key(*parts: bytes | str, length: int = 12) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:length]


def source_of(*modules_files: str) -> bytes:
    """Bytes of generator source files, so a change of the generator yields a new cache key."""
    return b"".join(Path(f).read_bytes() for f in modules_files)
