"""Engine-side counters exposed at /metrics in Prometheus text with vLLM's names."""

from __future__ import annotations

import bisect

# vLLM's bucket bounds for time_to_first_token_seconds.
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


class EngineMetrics:
    def __init__(self, model: str) -> None:
        self.labels = f'model_name="{model}",engine="0"'
        self.ttft_bucket_counts = [0] * (len(TTFT_BUCKETS_S) + 1)
        self.ttft_sum_s = 0.0
        self.ttft_count = 0
        self.prompt_tokens = 0
        self.prompt_tokens_cached = 0
        self.generation_tokens = 0
        self.requests_success = 0

    def observe_ttft(self, ttft_s: float) -> None:
        self.ttft_bucket_counts[bisect.bisect_left(TTFT_BUCKETS_S, ttft_s)] += 1
        self.ttft_sum_s += ttft_s
        self.ttft_count += 1

    def render(self, running: int, waiting: int) -> str:
        labels = self.labels
        lines = ["# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
                 "# TYPE vllm:time_to_first_token_seconds histogram"]
        cumulative = 0
        for bound, count in zip(TTFT_BUCKETS_S, self.ttft_bucket_counts):
            cumulative += count
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{bound}"}} {cumulative}')
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {self.ttft_count}')
        lines.append(f"vllm:time_to_first_token_seconds_sum{{{labels}}} {self.ttft_sum_s!r}")
        lines.append(f"vllm:time_to_first_token_seconds_count{{{labels}}} {self.ttft_count}")
        for name, value, help_text in (
            ("prompt_tokens", self.prompt_tokens, "Number of prefill tokens processed."),
            ("generation_tokens", self.generation_tokens, "Number of generation tokens processed."),
            ("prompt_tokens_cached", self.prompt_tokens_cached, "Number of cached prompt tokens."),
            ("request_success", self.requests_success, "Count of successfully processed requests."),
        ):
            lines += [f"# HELP vllm:{name}_total {help_text}", f"# TYPE vllm:{name}_total counter",
                      f"vllm:{name}_total{{{labels}}} {float(value)}"]
        for name, value, help_text in (
            ("num_requests_running", running, "Number of requests in model execution batches."),
            ("num_requests_waiting", waiting, "Number of requests waiting to be processed."),
        ):
            lines += [f"# HELP vllm:{name} {help_text}", f"# TYPE vllm:{name} gauge",
                      f"vllm:{name}{{{labels}}} {float(value)}"]
        return "\n".join(lines) + "\n"
