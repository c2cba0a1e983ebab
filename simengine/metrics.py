"""Engine-side counters exposed at /metrics in Prometheus text with vLLM's names.

Its gauges, read at each scrape (a sum over the admitted requests at most): requests running and
waiting, and the KV cache in use (simengine.engine says what it counts).

Plus one of the sim's own, `simengine:event_lateness_seconds`: how late the scheduler wrote each
event against its due time. It says whether the sim kept up (its truth stays true either way).
"""

from __future__ import annotations

import bisect

# vLLM's bucket bounds for request_decode_time_seconds (request_latency_buckets) and request_generation_tokens.
REQUEST_TIME_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                          240.0, 480.0, 960.0, 1920.0, 7680.0)
REQUEST_TOKENS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
# vLLM's bucket bounds for time_to_first_token_seconds.
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
LATENESS_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


class Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def render(self, name: str, labels: str, help_text: str) -> list[str]:
        lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, count in zip(self.bounds, self.counts):
            cumulative += count
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {cumulative}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        lines.append(f"{name}_count{{{labels}}} {self.count}")
        return lines


class EngineMetrics:
    def __init__(self, model: str) -> None:
        self.labels = f'model_name="{model}",engine="0"'
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.decode_time = Histogram(REQUEST_TIME_BUCKETS_S)  # per finished request: first token to last
        self.request_tokens = Histogram(REQUEST_TOKENS_BUCKETS)  # per finished request: tokens generated
        self.spec_drafts = self.spec_draft_tokens = self.spec_accepted_tokens = 0
        self.prompt_tokens = 0
        self.prompt_tokens_cached = 0
        self.generation_tokens = 0
        self.requests_success = 0

    def finished(self, generation, draft_tokens: int) -> None:
        """A request that finished: vLLM's per-request histograms and speculative counters."""
        self.requests_success += 1
        if generation.t_first_token is not None:
            self.decode_time.observe(generation.t_last_token - generation.t_first_token)
        self.request_tokens.observe(generation.completion_tokens)
        if draft_tokens:
            self.spec_drafts += generation.draft_n // draft_tokens
            self.spec_draft_tokens += generation.draft_n
            self.spec_accepted_tokens += generation.draft_accepted

    def render(self, running: int, waiting: int, kv_cache_usage: float, lateness: Histogram) -> str:
        labels = self.labels
        lines = self.ttft.render("vllm:time_to_first_token_seconds", labels,
                                 "Histogram of time to first token in seconds.")
        lines += self.decode_time.render("vllm:request_decode_time_seconds", labels,
                                         "Histogram of time spent in DECODE phase for request.")
        lines += self.request_tokens.render("vllm:request_generation_tokens", labels,
                                            "Number of generation tokens processed.")
        for name, value, help_text in (
            ("prompt_tokens", self.prompt_tokens, "Number of prefill tokens processed."),
            ("generation_tokens", self.generation_tokens, "Number of generation tokens processed."),
            ("prompt_tokens_cached", self.prompt_tokens_cached, "Number of cached prompt tokens."),
            ("request_success", self.requests_success, "Count of successfully processed requests."),
            ("spec_decode_num_drafts", self.spec_drafts, "Number of spec decoding drafts."),
            ("spec_decode_num_draft_tokens", self.spec_draft_tokens, "Number of draft tokens."),
            ("spec_decode_num_accepted_tokens", self.spec_accepted_tokens, "Number of accepted tokens."),
        ):
            lines += [f"# HELP vllm:{name}_total {help_text}", f"# TYPE vllm:{name}_total counter",
                      f"vllm:{name}_total{{{labels}}} {float(value)}"]
        for name, value, help_text in (
            ("num_requests_running", running, "Number of requests in model execution batches."),
            ("num_requests_waiting", waiting, "Number of requests waiting to be processed."),
            ("kv_cache_usage_perc", kv_cache_usage, "KV-cache usage. 1 means 100 percent usage."),
        ):
            lines += [f"# HELP vllm:{name} {help_text}", f"# TYPE vllm:{name} gauge",
                      f"vllm:{name}{{{labels}}} {float(value)}"]
        lines += lateness.render("simengine:event_lateness_seconds", labels,
                                 "How late the simulated engine wrote events against their due time.")
        return "\n".join(lines) + "\n"
