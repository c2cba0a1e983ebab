"""HTTP routes of the sim: OpenAI-compatible completions, Responses and Anthropic Messages, plus vLLM/llama.cpp
side endpoints."""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from time import perf_counter

from simengine.answer import Question, plan_answer
from simengine.config import FAULT_KINDS, FAULT_MODEL_PREFIX, RESPONSE_FAULTS, SimConfig
from simengine.connection import Connection, HttpRequest, Splitter, error_body
from simengine.conversation import ConversationError, from_messages, from_responses
from simengine.engine import Engine
from simengine.generation import Generation
from simengine.sse import ChunkEncoder, MessagesEncoder, ResponsesEncoder
from simengine.tokenizer import message_text, render_chat, tokenize


ID_PREFIXES = {"chat": "chatcmpl-", "completions": "cmpl-", "responses": "resp_", "messages": "msg_"}


class RequestError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


class Router:
    def __init__(self, config: SimConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.fault_rng = random.Random(config.seed)
        self.fault_kinds = config.fault_kind_list()
        self.id_prefix = os.urandom(3).hex()  # ids stay unique across restarts writing one log
        self.counter = 0
        self.never_answer = {config.never_answer} if config.never_answer else set()  # request numbers: fault hang
        self.routes = {
            ("GET", "/health"): self.health,
            ("GET", "/v1/models"): self.models,
            ("GET", "/metrics"): self.metrics,
            ("POST", "/tokenize"): self.tokenize,
            ("POST", "/v1/chat/completions"): self.chat_completions,
            ("POST", "/v1/completions"): self.completions,
            ("POST", "/v1/responses"): self.responses,
            ("POST", "/v1/messages"): self.messages,
            ("POST", "/sim/never-answer"): self.choose_unanswered,
        }

    def handle(self, connection: Connection, request: HttpRequest) -> None:
        route = self.routes.get((request.method, request.path))
        try:
            if route is None:
                known = any(path == request.path for _method, path in self.routes)
                raise RequestError(405 if known else 404, f"{request.method} {request.path} not found")
            route(connection, request)
        except RequestError as exc:
            connection.send_json(exc.status, error_body(str(exc), exc.kind, exc.status))
        except Exception:  # a sim bug: say so loudly, and leave no half-written response open
            traceback.print_exc(file=sys.stderr)
            connection.close()

    # -- side endpoints --
    def health(self, connection: Connection, _request: HttpRequest) -> None:
        connection.send_json(200, {"status": "ok"})

    def models(self, connection: Connection, _request: HttpRequest) -> None:
        # The served model first (clients take the first); then one name per fault kind, for clients
        # that can choose a model but cannot add a header.
        names = [self.config.model, *(f"{FAULT_MODEL_PREFIX}{kind}" for kind in FAULT_KINDS)]
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "llm-bench-sim",
                 "max_model_len": self.config.ctx_len} for name in names]
        connection.send_json(200, {"object": "list", "data": data})

    def metrics(self, connection: Connection, _request: HttpRequest) -> None:
        engine = self.engine
        text = engine.metrics.render(engine.running, len(engine.queue), engine.kv_cache_usage(),
                                     engine.scheduler.lateness)
        connection.send_body(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

    def tokenize(self, connection: Connection, request: HttpRequest) -> None:
        body = read_json(request)
        if "content" in body:  # llama.cpp
            connection.send_json(200, {"tokens": tokenize(str(body["content"]))})
            return
        if "messages" in body:  # vLLM, chat form: the same rendering as a chat request
            text = render_chat(require_messages(body), body.get("tools"))
        elif "prompt" in body:
            text = prompt_text(body["prompt"])
        else:
            raise RequestError(400, "give `content`, `prompt` or `messages`")
        tokens = tokenize(text)
        connection.send_json(200, {"count": len(tokens), "max_model_len": self.config.ctx_len, "tokens": tokens})

    def choose_unanswered(self, connection: Connection, request: HttpRequest) -> None:
        """``{"after": K}`` (default 1): the K-th completion request from now is never answered (fault hang);
        answers ``{"request": N}``, its number, which ends its request id (``...sim<prefix>NNNNNNN``)."""
        after = read_json(request).get("after", 1)
        if not isinstance(after, int) or isinstance(after, bool) or after < 1:
            raise RequestError(400, "`after` must be a positive integer")
        self.never_answer.add(self.counter + after)
        connection.send_json(200, {"request": self.counter + after})

    # -- completions --
    def chat_completions(self, connection: Connection, request: HttpRequest) -> None:
        body = read_json(request)
        self._chat(connection, request, body, "chat", require_messages(body), body.get("tools") or None,
                   body.get("max_completion_tokens") or body.get("max_tokens"), body.get("stop"))

    def responses(self, connection: Connection, request: HttpRequest) -> None:
        body = read_json(request)
        messages, tools = conversation(from_responses, body)
        self._chat(connection, request, body, "responses", messages, tools, body.get("max_output_tokens"),
                   body.get("stop"))

    def messages(self, connection: Connection, request: HttpRequest) -> None:
        body = read_json(request)
        messages, tools = conversation(from_messages, body)
        self._chat(connection, request, body, "messages", messages, tools, body.get("max_tokens"),
                   body.get("stop_sequences"))

    def _chat(self, connection: Connection, request: HttpRequest, body: dict, api: str, messages: list,
              tools: list | None, max_tokens, stop) -> None:
        """A conversation, whichever API carried it: one chat template, one answer."""
        users = [m for m in messages if m.get("role") == "user"]
        last_user_text = message_text(users[-1].get("content")) if users else ""
        self._complete(connection, request, body, render_chat(messages, tools), last_user_text,
                       messages[-1].get("role", "user"), tools, api, max_tokens, stop, thinking=thinks(body))

    def completions(self, connection: Connection, request: HttpRequest) -> None:
        body = read_json(request)
        if "prompt" not in body:
            raise RequestError(400, "`prompt` is required")
        text = prompt_text(body["prompt"])
        self._complete(connection, request, body, text, text, "user", None, "completions",
                       body.get("max_completion_tokens") or body.get("max_tokens"), body.get("stop"))

    def _complete(self, connection: Connection, request: HttpRequest, body: dict, text: str, last_user_text: str,
                  last_role: str, tools: list | None, api: str, max_tokens, stop, thinking: bool = False) -> None:
        config = self.config
        self.counter += 1
        request_id = f"{ID_PREFIXES[api]}sim{self.id_prefix}{self.counter:07d}"
        model = body.get("model")
        if model and model != config.model and not str(model).startswith(FAULT_MODEL_PREFIX):
            # Like vLLM (serving.py, _check_model): a name it does not serve is refused, not guessed.
            self._reject(connection, request, request_id, api, None, 404, error_body(
                f"The model `{model}` does not exist.", "NotFoundError", 404))
            return
        fault = self._pick_fault(request, body)
        tokens = tokenize(text)
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise RequestError(400, "max_tokens must be a positive integer")
        if len(tokens) + (max_tokens or 0) > config.ctx_len or len(tokens) >= config.ctx_len:
            self._reject(connection, request, request_id, api, None, 400, error_body(
                f"request ({len(tokens)} prompt tokens + {max_tokens or 0} max_tokens) exceeds the available "
                f"context size ({config.ctx_len} tokens), try increasing it", "exceed_context_size_error", 400))
            return
        if fault in RESPONSE_FAULTS:
            self._respond_fault(connection, request, request_id, api, fault)
            return
        question = Question(text, last_user_text, last_role, tools, max_tokens or config.ctx_len - len(tokens),
                            bool(body.get("ignore_eos")), stop_strings(stop),
                            config.reasoning_tokens if thinking else 0)
        answer = plan_answer(question, config.tokens_per_event, (config.answer_tokens_min, config.answer_tokens_max))
        chat_api = api in ("chat", "completions")
        # Responses and Messages always stream their usage; Chat Completions when stream_options ask.
        stream_options = (body.get("stream_options") or {}) if chat_api else {"include_usage": True}
        crlf = fault == "crlf"
        if chat_api:
            encoder = ChunkEncoder(request_id, config.model, int(time.time()), api == "chat", crlf=crlf)
        elif api == "responses":
            encoder = ResponsesEncoder(request_id, config.model, int(time.time()), crlf=crlf)
        else:
            encoder = MessagesEncoder(request_id, config.model, crlf=crlf)
        if fault == "split":
            connection.splitter = Splitter(connection, self.engine.scheduler, random.Random(request_id))
        elif fault == "buffered" and body.get("stream"):
            connection.held = bytearray()
        generation = Generation(
            self.engine, connection, request_id, answer, encoder, stream=bool(body.get("stream")),
            include_usage=bool(stream_options.get("include_usage")),
            continuous_usage=bool(stream_options.get("continuous_usage_stats")), fault=fault,
            prompt_tokens=len(tokens), block_hashes=self.engine.block_hashes(tokens), t_arrival=request.t_arrival,
            stall_s=float(request.headers.get("x-sim-stall-s") or config.stall_s))
        self.engine.submit(generation)

    def _pick_fault(self, request: HttpRequest, body: dict) -> str | None:
        if self.counter in self.never_answer:
            self.never_answer.discard(self.counter)
            return "hang"
        model = str(body.get("model") or "")
        asked = request.headers.get("x-sim-fault") or (
            model[len(FAULT_MODEL_PREFIX):] if model.startswith(FAULT_MODEL_PREFIX) else "")
        if asked:
            if asked not in FAULT_KINDS:
                raise RequestError(400, f"unknown fault {asked!r} (X-Sim-Fault or model {FAULT_MODEL_PREFIX}KIND);"
                                        f" known: {', '.join(FAULT_KINDS)}")
            return asked
        if self.config.fault_rate > 0 and self.fault_kinds and self.fault_rng.random() < self.config.fault_rate:
            return self.fault_rng.choice(self.fault_kinds)
        return None

    def _respond_fault(self, connection: Connection, request: HttpRequest, request_id: str, api: str,
                       fault: str) -> None:
        if fault == "http500":
            body = error_body("simulated internal error (fault http500)", "server_error", 500)
            self._reject(connection, request, request_id, api, fault, 500, body)
        elif fault == "http429":
            body = error_body("simulated overload (fault http429)", "rate_limit_error", 429)
            self._reject(connection, request, request_id, api, fault, 429, body, {"retry-after": "1"})
        elif fault == "hang":  # never answered: its line is written when the client gives up on it
            connection.on_lost = lambda: self.engine.log_rejected(
                {**rejected_truth(request_id, api, fault, 499, request.t_arrival, None), "t_closed": perf_counter()})
        else:
            html = b"<!DOCTYPE html><html><body><h1>Welcome</h1><p>Not an API.</p></body></html>"
            self.engine.log_rejected(rejected_truth(request_id, api, fault, 200, request.t_arrival, perf_counter()))
            connection.send_body(200, html, "text/html; charset=utf-8", {"x-request-id": request_id})

    def _reject(self, connection: Connection, request: HttpRequest, request_id: str, api: str, fault: str | None,
                status: int, body: dict, headers: dict | None = None) -> None:
        # Logged just before the write, so a client that has its answer finds the line.
        self.engine.log_rejected(rejected_truth(request_id, api, fault, status, request.t_arrival, perf_counter()))
        connection.send_json(status, body, {"x-request-id": request_id, **(headers or {})})


def conversation(read, body: dict) -> tuple[list[dict], list[dict] | None]:
    try:
        return read(body)
    except ConversationError as exc:
        raise RequestError(400, str(exc)) from None


def thinks(body: dict) -> bool:
    """Thinking is on unless the request switches it off as vLLM's Qwen3 template reads it
    (`chat_template_kwargs: {"enable_thinking": false}`; the sim profile's thinking_off), on every API
    (llama.cpp and vLLM pass chat_template_kwargs on from Responses and Messages requests too)."""
    kwargs = body.get("chat_template_kwargs")
    return not (isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False)


def read_json(request: HttpRequest) -> dict:
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        raise RequestError(400, "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise RequestError(400, "the body must be a JSON object")
    return body


def require_messages(body: dict) -> list:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise RequestError(400, "`messages` must be a non-empty list of objects")
    return messages


def stop_strings(stop) -> tuple[str, ...]:
    """OpenAI's `stop`: a string or a list of strings (empty ones mean nothing)."""
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise RequestError(400, "`stop` must be a string or a list of strings")
    return tuple(s for s in stop or () if s)


def prompt_text(prompt) -> str:
    if isinstance(prompt, list):
        return "".join(str(part) for part in prompt)
    return str(prompt)


def rejected_truth(request_id: str, api: str, fault: str | None, status: int, t_arrival: float,
                   t_response: float | None) -> dict:
    return {"request_id": request_id, "api": api, "fault": fault, "status": status, "t_arrival": t_arrival,
            "t_admitted": None, "t_first_byte": t_response, "t_first_token": None, "t_last_token": None, "n_events": 0,
            "prompt_tokens": None, "cached_tokens": None, "completion_tokens": 0, "first_event_tokens": 0,
            "tokens_per_event": None, "ttft_s": None, "decode_tps": None, "reasoning_tokens": 0,
            "t_first_answer_token": None, "ttfo_s": None, "prompt_chunks": 0, "pauses": [], "n_pauses": 0,
            "finish_reason": None, "wall_time": time.time()}
