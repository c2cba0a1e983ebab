"""pytest fixtures for real engines on 127.0.0.1, imported by tests/conftest.py (the fixtures below and the
pytest_collection_finish hook; pyproject's pythonpath puts the repository root on sys.path).

  llamacpp_server  session: llama.cpp (xllamacpp) + tiny random GGUF; 4 slots, unified KV, ctx 32768  -> LlamaServer
  smollm2_server   session: llama.cpp + SmolLM2-135M-Instruct Q4_1 (trained weights); 4 slots, ctx 8192,
                   one compute thread (see SMOLLM2_THREADS)                                      -> LlamaServer
  smollm2_ngram_server session: as smollm2_server + n-gram speculative decoding (no draft model) -> LlamaServer
  vllm_server      session: vLLM 0.32.0 CPU in its own venv + tiny random HF llama; ctx 32768, 8 seqs; all of
                   vLLM on one core, .client_cpus the others (see vllm_cores)                    -> VllmServer
  vllm_ngram_server session: as vllm_server + --speculative-config ngram (3 tokens)   -> VllmServer
  engine_cache_dir session: ${LLM_BENCH_CACHE:-~/.cache/llm-bench}

Each handle has .url ("http://127.0.0.1:PORT", no /v1), .base_url (url + "/v1"), .model (served name), .stop().

Policy when an engine cannot be set up: with env CI set the fixture FAILS (error, full reason). Locally it
fails too, unless LLM_BENCH_SKIP_ENGINES is set: "1"/"all" skips every engine fixture without trying,
a comma list ("vllm" or "vllm,smollm2") skips those only. CI ignores LLM_BENCH_SKIP_ENGINES.

The hook pytest_collection_finish starts installing vLLM's venv (first time only, ~4 min) in the background
when a collected test uses a vLLM fixture: the other tests run meanwhile, and the vLLM fixtures wait for it
(within a test's timeout: the install, then vLLM's start, ~5 min of its 10). The install holds the machine
shared, as a test does (tests/machine.py): an ``alone`` test waits for it. A failed install is reported by
the fixture, loudly.
"""

from __future__ import annotations

import os
import threading
import traceback
from pathlib import Path

import pytest

from .cache import cache_root

__all__ = ["engine_cache_dir", "llamacpp_server", "smollm2_server", "smollm2_ngram_server", "vllm_server",
           "vllm_ngram_server", "pytest_collection_finish"]

VLLM_FIXTURES = {"vllm_server", "vllm_ngram_server"}
_prepare_errors: dict[str, BaseException] = {}
_preparing: dict[str, threading.Thread] = {}  # an engine's install under way in the background


def _skip_requested(engine: str) -> bool:
    if os.environ.get("CI"):
        return False
    value = os.environ.get("LLM_BENCH_SKIP_ENGINES", "").strip().lower()
    if not value or value in ("0", "false", "no"):
        return False
    if value in ("1", "all", "true", "yes"):
        return True
    return engine in {v.strip() for v in value.split(",")}


def _fail(engine: str, exc: BaseException):
    detail = "".join(traceback.format_exception(exc))
    where = "CI" if os.environ.get("CI") else "locally (set LLM_BENCH_SKIP_ENGINES=1 to skip engines)"
    pytest.fail(f"engine {engine!r} could not be set up {where}:\n{detail}", pytrace=False)


def _start(engine: str, starter):
    if _skip_requested(engine):
        pytest.skip(f"{engine}: skipped by LLM_BENCH_SKIP_ENGINES")
    if engine in _preparing:
        _preparing[engine].join()
    if engine in _prepare_errors:
        _fail(engine, _prepare_errors[engine])
    try:
        return starter()
    except Exception as exc:  # noqa: BLE001 - report everything, loudly
        _fail(engine, exc)


def pytest_collection_finish(session):
    """Start installing the vLLM venv + tiny HF model in the background, if any collected test needs vLLM
    and it is not installed yet."""
    if session.config.option.collectonly or _skip_requested("vllm"):
        return
    if not any(VLLM_FIXTURES & set(getattr(item, "fixturenames", ())) for item in session.items):
        return
    from .vllm import venv_dir

    cache = cache_root()
    if (venv_dir(cache) / ".complete").exists():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"llm-bench engines: installing vLLM into {venv_dir(cache)} in the background "
                            "(one time, ~4 min)")
    _preparing["vllm"] = threading.Thread(target=_install_vllm, args=(cache,), name="vllm-install", daemon=True)
    _preparing["vllm"].start()


def _install_vllm(cache: Path) -> None:
    """vLLM's venv and the tiny model, made once (a file lock: one xdist worker installs, the others wait)."""
    from tests.machine import Machine

    from .vllm import ensure_tiny_hf_model, ensure_vllm_venv

    machine = Machine()
    machine.take(alone=False)  # pip's work is load like a test's: an `alone` test waits until it is done
    try:
        ensure_tiny_hf_model(cache, ensure_vllm_venv(cache))
    except Exception as exc:  # noqa: BLE001 - the vLLM fixtures report it
        _prepare_errors["vllm"] = exc
    finally:
        machine.release()


@pytest.fixture(scope="session")
def engine_cache_dir() -> Path:
    return cache_root()


def _logs_dir(cache: Path) -> Path:
    d = cache / "logs"
    d.mkdir(parents=True, exist_ok=True)
    return d


def start_tiny_llamacpp(cache: Path):
    from .llamacpp import start_llamacpp
    from .tiny_gguf import ensure_tiny_gguf

    return start_llamacpp(ensure_tiny_gguf(cache), alias="tiny-llama", n_ctx=32768, n_parallel=4,
                          log_path=_logs_dir(cache) / f"llamacpp-tiny-{os.getpid()}.log")


@pytest.fixture(scope="session")
def llamacpp_server(engine_cache_dir):
    server = _start("llamacpp", lambda: start_tiny_llamacpp(engine_cache_dir))
    yield server
    server.stop()


# SmolLM2 is held to llama.cpp's own clock at 0.1%: it computes on one thread, so that its HTTP thread
# (and the client) have the machine's other core. With two compute threads on two cores, the threads
# spin between graph runs and the HTTP thread waits for a time slice before it writes an event: measured
# here, a first token or a finish chunk sent 2-4 ms after llama.cpp stamped it, now and then (needle
# answers of 12-17 tokens: up to +2.5% and -0.8% against predicted_per_second; one thread: at most 0.05%).
# A real delay users see, which the engine's timings cannot: the agreement test is not the place for it
# (docs/engines.md#llamacpp-every-core-delay).
SMOLLM2_THREADS = 1


def start_smollm2(cache: Path, ngram: bool = False):
    from .llamacpp import start_llamacpp
    from .smollm2 import N_CTX_TRAIN, ensure_smollm2

    alias = "smollm2-135m-instruct-ngram" if ngram else "smollm2-135m-instruct"
    return start_llamacpp(ensure_smollm2(cache), alias=alias, n_ctx=N_CTX_TRAIN, n_parallel=4,
                          threads=SMOLLM2_THREADS, extra_params=NGRAM_SPECULATION if ngram else None,
                          log_path=_logs_dir(cache) / f"llamacpp-{alias}-{os.getpid()}.log")


@pytest.fixture(scope="session")
def smollm2_server(engine_cache_dir):
    server = _start("smollm2", lambda: start_smollm2(engine_cache_dir))
    yield server
    server.stop()


# llama.cpp's n-gram speculation: no draft model; drafts come from what the context already holds
# (docs/engines.md#llamacpp-ngram-speculation).
NGRAM_SPECULATION = {
    "speculative.types": ["xllamacpp.common_speculative_type.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE"],
    "speculative.ngram_simple.size_n": 3,
    "speculative.ngram_simple.size_m": 16,
    "speculative.ngram_simple.min_hits": 1,
}


@pytest.fixture(scope="session")
def smollm2_ngram_server(engine_cache_dir):
    """smollm2_server with n-gram speculative decoding: accepted draft tokens are sent back to back, one
    event each, and the final timings carry draft_n and draft_n_accepted."""
    server = _start("smollm2", lambda: start_smollm2(engine_cache_dir, ngram=True))
    yield server
    server.stop()


# vLLM is held to its own histograms at 0.5%: all of it (API server, engine core, worker) runs on one
# core and the client (run_cli(..., cpus=server.client_cpus)) on the other. Its engine core waits for
# the worker's reply to each step by spinning (sched_yield, vllm/distributed/device_communicators/
# shm_broadcast.py): with only the worker bound to core 0, the engine core took the other core (40-50%
# of it while decoding, measured) and the API server waited behind it before it streamed a chunk the
# engine had stamped. Measured here, n-gram answers cut by a stop string, pooled decode diff against
# vLLM's histograms, load average 2.6-7.2 from other work: only the worker on core 0 (before) +0.02 to
# +32% (11 runs, median +6%; CI +10.6%); engine core beside the API server on core 1, +27 to +41%;
# engine core and worker on core 0, API server and client on core 1, -0.35 to +0.16%; all of vLLM on
# core 0, client on core 1: 31 runs, all within 0.28%, median |diff| 0.04% (docs/engines.md#vllm-one-core).
def vllm_cores() -> set[int] | None:
    """The first core this process may use, for all of vLLM; None (nothing pinned) on one core."""
    cores = sorted(os.sched_getaffinity(0))
    return {cores[0]} if len(cores) >= 2 else None


def start_tiny_vllm(cache: Path, ngram: bool = False):
    from .vllm import NGRAM_SPECULATIVE_CONFIG, start_vllm

    if ngram:
        return start_vllm(cache, served_model_name="tiny-llama-hf-ngram",
                          speculative_config=NGRAM_SPECULATIVE_CONFIG, cpus=vllm_cores())
    return start_vllm(cache, cpus=vllm_cores())


@pytest.fixture(scope="session")
def vllm_server(engine_cache_dir):
    server = _start("vllm", lambda: start_tiny_vllm(engine_cache_dir))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vllm_ngram_server(engine_cache_dir):
    """vLLM as vllm_server, plus n-gram speculative decoding (vllm.NGRAM_SPECULATIVE_CONFIG: 3 draft tokens,
    prompt_lookup_max 3). A separate server process (~60 s start, ~4.5 GB RSS); drafts only happen when the
    context repeats itself (e.g. temperature 0 on the random model falls into loops)."""
    server = _start("vllm", lambda: start_tiny_vllm(engine_cache_dir, ngram=True))
    yield server
    server.stop()
