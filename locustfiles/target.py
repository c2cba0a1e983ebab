"""The server this process measures, resolved once per run: the model it is asked for, its engine profile,
the API key.

The first user of a run that needs it asks the server (``/v1/models``, and the engine's own paths when
the profile is detected): ``environment.llm.target()``; the users that start beside it wait for that
answer, under the run's lock. A host given as the OpenAI base URL (``.../v1``) is the server's root;
without --host, $OPENAI_BASE_URL, as the OpenAI tools do. A new run (the web UI may change the host
between runs) resolves it again. The API key comes from $OPENAI_API_KEY in each process, never from an
option (options are shown in the web UI and sent to workers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from bench_tasks import engine, server
from bench_tasks.options import Values


@dataclass
class Target:
    model: str
    profile: engine.Profile
    api_key: str
    thinking: bool = False  # --thinking on: the model thinks as its users run it (the profile's switch not sent)

    @property
    def extras(self) -> dict:
        return self.profile.extras(thinking_off=not self.thinking)


def default_host(host: str | None) -> str | None:
    """The host a run measures: --host, else $OPENAI_BASE_URL, as the server's root (None: not given yet)."""
    host = host or os.environ.get("OPENAI_BASE_URL") or None
    return server.base_url(host) if host else None


def resolve(host: str, given: Values) -> Target:
    api_key = os.environ.get("OPENAI_API_KEY", "")
    models = server.list_models(host, api_key=api_key)
    model = given.model or server.first_model(models)
    if given.engine and given.engine != "auto":
        profile = engine.profile(given.engine)
    else:
        profile = engine.detect(host, models, api_key=api_key)
    return Target(model=model, profile=profile, api_key=api_key, thinking=given.thinking)
