"""The server this process measures, resolved once per run: the model it is asked for, its engine profile,
the API key, and what each shape of prompt may share with the server's cache (bench_tasks.cache_share:
the template's opening and the run's mark, measured once with the server's tokenizer, or where it has none
with two short requests; unknown, and no request checked, when neither tells).

The first user of a run that needs it asks the server (``/v1/models``, and the engine's own paths when
the profile is detected): ``environment.llm.target()``; the users that start beside it wait for that
answer, under the run's lock. A host given as the OpenAI base URL (``.../v1``) is the server's root;
without --host, $OPENAI_BASE_URL, as the OpenAI tools do. A new run (the web UI may change the host
between runs) resolves it again. The API key comes from $OPENAI_API_KEY in each process, never from an
option (options are shown in the web UI and sent to workers).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from bench_tasks import cache_share, engine, server, tokens
from bench_tasks.options import Values


@dataclass
class Target:
    model: str
    profile: engine.Profile
    api_key: str
    thinking: bool = False  # --thinking on: the model thinks as its users run it (the profile's switch not sent)
    shares: dict = field(default_factory=dict)  # cache_share shape -> the tokens its opening may share (None: unknown)

    @property
    def extras(self) -> dict:
        return self.profile.extras(thinking_off=not self.thinking)

    def shareable_tokens(self, messages: list[dict], tools: list[dict] | None = None) -> int | None:
        return self.shares.get(cache_share.shape(messages, tools))


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
    resolved = Target(model=model, profile=profile, api_key=api_key, thinking=given.thinking)
    resolved.shares = _shares(host, resolved, given.mark, given.read_timeout)
    return resolved


def _shares(host: str, resolved: Target, mark: str, timeout_s: float) -> dict:
    """What each shape of prompt may share; a server whose tokenizer or cache answers oddly leaves it unknown
    (the requests are then not checked, and the report says so), never fails the run."""
    ids = tokens.token_ids(host, resolved.profile, resolved.model, resolved.api_key, timeout_s)
    cached = None if ids else tokens.cached_after(host, resolved.model, resolved.api_key, timeout_s)
    shares = {}
    for shape in cache_share.SHAPES:
        if cached is not None and shares.get(cache_share.USER, 0) is None:
            shares[shape] = None  # its cache said nothing of the first shape: two requests more say no more
            continue
        try:
            shares[shape] = cache_share.measure(shape, mark, ids, cached)
        except server.ServerError as exc:
            logging.warning("llm-bench: what %s prompts may share with the cache is unknown: %s", shape, exc)
            shares[shape] = None
    return shares

