"""Side requests to the server under test: models, tokenize, metrics, props.

Plain ``urllib`` so the CLI, the analysis and the Locust glue can all use it (inside Locust,
gevent has patched the socket module and these calls yield like any other I/O). None of these
requests is measured.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

MODELS_PATH = "/v1/models"


def base_url(url: str) -> str:
    """The server's root URL: what the OpenAI SDK calls the base URL (``.../v1``) works too.

    Every path we send starts with ``/v1`` or is an engine's own root path (``/tokenize``,
    ``/metrics``, ``/props``), so a trailing ``/v1`` (and slash) is dropped here, once.
    """
    root = url.strip().rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class ServerError(Exception):
    """The server could not be reached or answered something unusable; the message says what to do."""


class Unreachable(ServerError):
    """No server answered at the address: the connection was refused, or dropped before any answer (a server
    that crashed, and that its supervisor may be bringing back; or a wrong URL)."""


def get_json(base_url: str, path: str, *, api_key: str = "", timeout_s: float = 10.0) -> dict:
    return _request(base_url, path, None, api_key, timeout_s)


def post_json(base_url: str, path: str, body: dict, *, api_key: str = "", timeout_s: float = 120.0) -> dict:
    return _request(base_url, path, body, api_key, timeout_s)


def get_text(base_url: str, path: str, *, api_key: str = "", timeout_s: float = 10.0) -> str:
    request = urllib.request.Request(base_url.rstrip("/") + path, headers=_headers(api_key))
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return response.read().decode("utf-8", "replace")


def _headers(api_key: str) -> dict:
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _request(base_url: str, path: str, body: dict | None, api_key: str, timeout_s: float) -> dict:
    url = base_url.rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=_headers(api_key))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            raw = response.read()
    except urllib.error.HTTPError as exc:
        detail = " ".join(exc.read()[:300].decode("utf-8", "replace").split())  # one line, as errors are printed
        raise ServerError(f"{url} answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        kind = Unreachable if isinstance(reason, ConnectionError) else ServerError  # not a timeout: nobody there
        raise kind(f"cannot reach {url} ({reason}); is the server running and the URL right?") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise ServerError(f"{url} did not answer JSON: is this an OpenAI-compatible server?") from None


def list_models(base_url: str, *, api_key: str = "") -> dict:
    """The /v1/models answer; raises ServerError with advice when the server is not OpenAI-like."""
    answer = get_json(base_url, MODELS_PATH, api_key=api_key)
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), list) or not answer["data"]:
        raise ServerError(f"{base_url}/v1/models lists no model: is this an OpenAI-compatible server?")
    nameless = [m for m in answer["data"] if not isinstance(m, dict) or not isinstance(m.get("id"), str) or not m["id"]]
    if nameless:
        raise ServerError(f"{base_url}/v1/models lists {len(nameless)} model(s) without an id (e.g. "
                          f"{str(nameless[0])[:80]}): is this an OpenAI-compatible server?")
    return answer


def first_model(models: dict) -> str:
    return str(models["data"][0]["id"])
