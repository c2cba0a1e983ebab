"""pytest fixtures for real engines on 127.0.0.1. Import them in tests/conftest.py as

    from engines.fixtures import engine_cache_dir, llamacpp_server, smollm2_server  # noqa: F401

(`engines`, not `tests.engines`: tests/ has no __init__.py, so pytest puts tests/ itself on sys.path;
`tests.engines` only resolves under `python -m pytest` from the repo root.)

  llamacpp_server  session: llama.cpp (xllamacpp) + tiny random GGUF; 4 slots, unified KV, ctx 32768  -> LlamaServer
  smollm2_server   session: llama.cpp + SmolLM2-135M-Instruct Q4_1 (trained weights); 4 slots, ctx 8192 -> LlamaServer
  (vllm_server: coming next)
  engine_cache_dir session: ${LLM_BENCH_CACHE:-~/.cache/llm-bench}

Each handle has .url ("http://127.0.0.1:PORT", no /v1), .base_url (url + "/v1"), .model (served name), .stop().

Policy when an engine cannot be set up: with env CI set the fixture FAILS (error, full reason). Locally it
fails too, unless LLM_BENCH_SKIP_ENGINES is set: "1"/"all" skips every engine fixture without trying,
a comma list ("vllm" or "vllm,smollm2") skips those only. CI ignores LLM_BENCH_SKIP_ENGINES.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import pytest

from .cache import cache_root


def _skip_requested(engine: str) -> bool:
    if os.environ.get("CI"):
        return False
    value = os.environ.get("LLM_BENCH_SKIP_ENGINES", "").strip().lower()
    if not value or value in ("0", "false", "no"):
        return False
    if value in ("1", "all", "true", "yes"):
        return True
    return engine in {v.strip() for v in value.split(",")}


def _start(engine: str, starter):
    if _skip_requested(engine):
        pytest.skip(f"{engine}: skipped by LLM_BENCH_SKIP_ENGINES")
    try:
        return starter()
    except Exception as exc:  # noqa: BLE001 - report everything, loudly
        detail = "".join(traceback.format_exception(exc))
        where = "CI" if os.environ.get("CI") else "locally (set LLM_BENCH_SKIP_ENGINES=1 to skip engines)"
        pytest.fail(f"engine {engine!r} could not be set up {where}:\n{detail}", pytrace=False)


@pytest.fixture(scope="session")
def engine_cache_dir() -> Path:
    return cache_root()


def _logs_dir(cache: Path) -> Path:
    d = cache / "logs"
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="session")
def llamacpp_server(engine_cache_dir):
    from .llamacpp import start_llamacpp
    from .tiny_gguf import ensure_tiny_gguf

    def start():
        model = ensure_tiny_gguf(engine_cache_dir)
        return start_llamacpp(model, alias="tiny-llama", n_ctx=32768, n_parallel=4,
                              log_path=_logs_dir(engine_cache_dir) / f"llamacpp-tiny-{os.getpid()}.log")

    server = _start("llamacpp", start)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def smollm2_server(engine_cache_dir):
    from .llamacpp import start_llamacpp
    from .smollm2 import N_CTX_TRAIN, ensure_smollm2

    def start():
        model = ensure_smollm2(engine_cache_dir)
        return start_llamacpp(model, alias="smollm2-135m-instruct", n_ctx=N_CTX_TRAIN, n_parallel=4,
                              log_path=_logs_dir(engine_cache_dir) / f"llamacpp-smollm2-{os.getpid()}.log")

    server = _start("smollm2", start)
    yield server
    server.stop()
