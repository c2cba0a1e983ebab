"""The simulated engine: an OpenAI-compatible server with known true timings (stdlib only).

It imitates llama.cpp's and vLLM's stream shapes and writes, per request, the true times of its
events to a truth log, so the client's measurements can be checked. It never imports client code.
"""

from simengine.config import SimConfig
from simengine.process import SimProcess, start_process

__all__ = ["SimConfig", "SimProcess", "start_process"]
