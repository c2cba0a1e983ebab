"""llm-bench's own command-line options, added to Locust's parser (and to the web UI's start form).

Locust forwards parsed options to workers when a run starts, so every process sees the same values
(docs/locust.md#options-reach-workers).
The API key is deliberately not an option: options are shown in the web UI and sent to workers,
so the key is read from OPENAI_API_KEY in each process instead.
"""

from __future__ import annotations

from locust import events

from bench_tasks.capacity import AUTO, SearchOptions

SEARCH = SearchOptions()  # the search's defaults, the same here and in `llm-bench capacity`


@events.init_command_line_parser.add_listener
def add_options(parser) -> None:
    # Locust's own add_argument (not an argument group's) knows include_in_web_ui.
    group = parser
    group.add_argument("--llm-out", default="llm-bench-out", help="Directory for records.jsonl and requests.csv")
    group.add_argument("--no-llm-report", action="store_true", default=False,
                       help="Do not write the report (summary.md, report.html) into --llm-out when a run ends")
    group.add_argument("--setup", default="", include_in_web_ui=True, help="Label of the serving setup under test")
    group.add_argument("--engine", default="auto", include_in_web_ui=True,
                       help="Engine profile (vllm, llamacpp, sglang, ollama, generic, sim) or auto-detect")
    group.add_argument("--model", default="", include_in_web_ui=True, help="Model name (default: the first in /v1/models)")
    group.add_argument("--client-host", default="", help="Name of this client machine in the records (default: hostname)")
    group.add_argument("--read-timeout", type=float, default=300.0,
                       help="Seconds without a byte before a request counts as stalled (long prompts need long)")
    group.add_argument("--llm-requests", type=int, default=0, include_in_web_ui=True,
                       help="chat.py: stop after this many requests in total (0: run until stopped)")
    group.add_argument("--max-tokens", type=int, default=256, include_in_web_ui=True,
                       help="chat.py, classroom.py, capacity.py: max_tokens per answer")
    group.add_argument("--ignore-eos", action="store_true", default=False, include_in_web_ui=True,
                       help="chat.py, classroom.py, capacity.py: ask for exactly --max-tokens tokens "
                            "(where the engine accepts ignore_eos)")
    group.add_argument("--think-time", default="10-40", include_in_web_ui=True,
                       help="classroom.py, capacity.py: seconds a student thinks between an answer and the next "
                            "question, a range drawn uniformly (10-40) or one value (2)")
    group.add_argument("--chat-question", action="append", default=None,
                       help="chat.py: ask this instead of the three chat questions (repeat for several)")
    group.add_argument("--chat-stop", action="append", default=None,
                       help="chat.py: end answers at this stop string (OpenAI's `stop`; repeat for several)")
    suite = parser
    suite.add_argument("--runs", type=int, default=3, include_in_web_ui=True, help="Runs per test (bursts: rounds)")
    suite.add_argument("--sizes", default="4k,16k,32k", include_in_web_ui=True, help="Fresh prompt sizes in tokens")
    suite.add_argument("--needle-sizes", default="32k,128k", include_in_web_ui=True, help="Needle prompt sizes")
    suite.add_argument("--bursts", default="1,4,12", include_in_web_ui=True, help="Simultaneous requests per burst")
    suite.add_argument("--only", default="chat,prompt,agent,burst,needle", include_in_web_ui=True,
                       help="Scenarios to run, in the suite's fixed order")
    search = parser
    search.add_argument("--slo", default="ttft_p95=1.0", include_in_web_ui=True,
                        help="capacity.py: the goal each step is judged by, e.g. ttft_p95=1.0,decode_p5=10,errors=0.01")
    search.add_argument("--start-students", default=AUTO, include_in_web_ui=True,
                        help="capacity.py: auto (probe the server and start at the predicted knee) or the first "
                             "class size (then the class grows by --step)")
    search.add_argument("--step", default=SEARCH.step, include_in_web_ui=True,
                        help="capacity.py, with a numbered --start-students: how the class grows until the SLO "
                             "breaks: x2 (double) or +4 (add four)")
    search.add_argument("--max-students", type=int, default=SEARCH.max_students, include_in_web_ui=True,
                        help="capacity.py: the largest class tried")
    search.add_argument("--resolution", type=int, default=SEARCH.resolution, include_in_web_ui=True,
                        help="capacity.py: refine until the last class that met the SLO and the first that missed "
                             "are this many students apart")
    search.add_argument("--step-s", type=float, default=SEARCH.step_s, include_in_web_ui=True,
                        help="capacity.py: seconds each step's judged window lasts at least")
    search.add_argument("--settle-s", type=float, default=None,
                        help="capacity.py: seconds a new class settles before its window opens "
                             "(default: the top of --think-time)")
    search.add_argument("--min-requests", type=int, default=SEARCH.min_requests, include_in_web_ui=True,
                        help="capacity.py: questions each judged window holds at least")
    search.add_argument("--max-step-s", type=float, default=None,
                        help="capacity.py: seconds a window that cannot tell yet (an interval straddles its goal) "
                             "goes on at most before it is decided on its point estimate (default: three times "
                             "--step-s)")
