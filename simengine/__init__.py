"""The simulated engine: an OpenAI-compatible server whose true timings are known (stdlib only).

It imitates llama.cpp's and vLLM's stream shapes and logs, per request, when each of its events
was written, so the client's measurements can be checked against the truth. It never imports the
client's code: a shared bug would hide itself.

Use:
    python -m simengine [--port 8000] [--slots 4] [--decode-tps 120] ...   (--help lists all)
    handle = simengine.start_process(simengine.SimConfig(truth_log="truth.jsonl", slots=4))
    handle.url, handle.port; handle.stop()      # own process; port 0 (the default here) = any free port

Endpoints: GET /health, /v1/models, /metrics (vLLM names; gauges vllm:num_requests_running,
vllm:num_requests_waiting, vllm:kv_cache_usage_perc = tokens held by admitted requests / kv_tokens);
POST /v1/chat/completions, /v1/completions, /v1/responses (OpenAI Responses), /v1/messages (Anthropic
Messages) (stream or not), /tokenize (llama.cpp `content` or vLLM `prompt`/`messages`), /sim/never-answer
(a test's: the next request, or the K-th from now, is never answered; see Faults).

The other APIs (simengine.conversation, simengine.sse): a Responses or Messages request's conversation
becomes chat messages and tools (instructions or system first; Responses' function_call and
function_call_output items, Messages' tool_use and tool_result blocks as the assistant's tool calls and
tool messages), rendered with the one chat template, so the same conversation is the same prompt and
the same answer on every API, as llama.cpp and vLLM convert them. Limits: `max_output_tokens` and
`stop` (Responses), `max_tokens` and `stop_sequences` (Messages), `ignore_eos` and the thinking switch
(`chat_template_kwargs`) on both. They stream their typed events (an `event:` line, then `data:` with
the same `type`) in llama.cpp's sequence, with two differences: the opening events (Messages'
message_start with the prompt's usage: input_tokens, cache_read_input_tokens, output_tokens 0;
Responses' response.created and response.in_progress) are written when the request takes its slot
(`t_first_byte`), as vLLM writes them, not with the first token as llama.cpp does; and each token event
is its own write. A block or item opens with its first token (content_block_start, or
response.output_item.added and response.content_part.added, written together with the first delta):
thinking or a reasoning item first, then text or the tool call (tool_use with its name; a function_call
item with its name and call_id `fc_<id>`), whose header event is the name's token. The end, in one
write: Messages' content_block_stop per block, message_delta (stop_reason end_turn, max_tokens or
tool_use; usage.output_tokens) and message_stop; Responses' ...done events and response.completed with
the usage (input_tokens, output_tokens, input_tokens_details.cached_tokens,
output_tokens_details.reasoning_tokens) and llama.cpp's `timings` beside the response, status
`completed` also when max_output_tokens cut the answer (as llama.cpp). Always with usage (stream_options
is Chat Completions'), never per event. Faults: error_event is an `error` event and no end; no_done
leaves out message_stop or response.completed; no_usage every usage; keepalive sends Messages' `ping`
events (Responses: `: ping` comments); the others as on chat.

Prefill (`prefill_mode`): concurrent (the default) reads each admitted prompt on its own at
prefill_tps while the others decode undisturbed; batched reads prompts as llama.cpp's server loop
and vLLM's chunked prefill do (simengine.batching): in chunks of up to n_batch tokens less one per
decoding stream, c / prefill_tps seconds each with every decoding stream paused, one decode step
between chunks; a prompt's first token comes when its last chunk ends.

Thinking (`reasoning_tokens` > 0): each chat answer streams that many tokens as
`delta.reasoning_content` first, then the answer; usage has `completion_tokens_details:
{"reasoning_tokens": N}`; a request with `chat_template_kwargs: {"enable_thinking": false}` gets no
reasoning (the sim profile's thinking_off).

A request for a model it does not serve (neither `model` nor `fault/KIND`) gets HTTP 404, as vLLM
answers it; a request without a model is served.

Faults, per request with the header `X-Sim-Fault: KIND` or the model `fault/KIND` (listed by
/v1/models after the served model), or at random (`fault_rate`, `fault_kinds`):
http500, http429 (Retry-After: 1), non_sse (200 text/html), hang (never answered: not a byte sent, the
connection held open until the client closes it; also the `never_answer`-th request, or the one chosen while
it runs by POST /sim/never-answer {"after": K}: the K-th from now), drop (connection closed after 3 content
events), malformed (one invalid-JSON event after 3), error_event (an error event after 3, then
[DONE]), stall (silent for stall_s or `X-Sim-Stall-S` after 3, then closed), no_done, no_usage,
keepalive (`: ping` comments between events), crlf (CRLF line endings), split (bytes in small
fragments with sub-millisecond gaps), buffered (the whole stream held and sent at its end, as a
buffering proxy or a starved event loop delivers it; the truth log keeps the generation times).

Truth log (JSONL, one line per finished request, flushed per line; times are perf_counter seconds,
CLOCK_MONOTONIC, comparable with the client's): request_id, api (chat, completions, responses or
messages: the path it served), fault, status, t_arrival (request fully read), t_admitted (slot taken),
t_first_byte (role chunk written; message_start, response.created), t_first_token, t_last_content
(first/last content, reasoning or tool-call event written), t_last_token (the last token generated: the
closing write's when the answer ends with tokens that have no text, else t_last_content), n_events,
prompt_tokens, cached_tokens, completion_tokens (every token generated), first_event_tokens,
closing_tokens (generated after the last content event, without text: the end-of-sequence token of an
answer that ended by itself, or a stop string), tokens_per_event, draft_n, draft_n_accepted
(llama.cpp-style drafting), ttft_s = t_first_token - t_arrival, decode_tps = (completion_tokens -
first_event_tokens) / (t_last_token - t_first_token), reasoning_tokens (0 when not thinking),
t_first_answer_token (the first content or tool-call event after the reasoning; t_first_token when
there was none; null when the reasoning used up max_tokens), ttfo_s = t_first_answer_token -
t_arrival, prompt_chunks (batched mode: the chunks its prompt was read in; else 0), finish_reason,
wall_time, and its pauses (batched mode): every gap between two consecutive token events of the
request (from its first token to its last, the finish chunk of a closing token included) that a
prompt chunk lengthened, as `pauses`: [{t_start (the last event written before it), t_end (the
first event after it), frozen_s (how long the decode clock stood still inside it), cause_request_id
(the request whose prompt tokens filled most of that frozen time)}], the first 1000 kept, and
n_pauses counting them all. With one token per event a pause's gap is one decode step and one chunk.

How answers end (see simengine.answer): by themselves with an end-of-sequence token, by a `stop`
string (counted, not sent; text that may begin one held back), or at `max_tokens` / `ignore_eos`.
`draft_tokens` > 0 speculates as llama.cpp does: one event per token, each step's accepted draft
tokens written back to back, `timings` with draft_n and draft_n_accepted. Status 499: the client went away first (a hung request's line, written then, has t_closed). A line is written just before
its response's last bytes, so a client that has seen the end of a response finds its line.
"""

from simengine.config import SimConfig
from simengine.process import SimProcess, start_process

__all__ = ["SimConfig", "SimProcess", "start_process"]
