"""Every option of llm-bench, declared once: its flag, how its text is read, its default, its help, where it shows.

From ``OPTIONS`` come the command line's options (``llm-bench run chat``, ``quick``, ``capacity``, ``sweep``),
Locust's (locustfiles/llm_run.py: ``locust -f ...`` and the web UI's start form), the argv a command
hands to Locust and the ``options`` of ``settings.json``. Every path reads an option's text with the
option's own parser (text -> value, or ValueError in one line): argparse's ``type=`` on both parsers,
and ``values`` when a run starts, since the web UI's start form writes text no parser has read.

A parsed namespace keeps each option's text (a switch its bool, a repeated option its list of texts):
the web UI writes text into it and keeps the type it finds there. ``values`` turns a namespace into
typed values, and ``Values.suite``, ``Values.search`` and ``Values.open_loop`` make the suite's, the search's
and the open loop's options.
Adding an option is one line in ``OPTIONS``; a workload then reads ``values(...).its_name``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

from bench_tasks import arrivals as arrival_processes
from bench_tasks import apis, run_mark
from bench_tasks import slo as slos
from bench_tasks.capacity.search_options import AUTO, SearchOptions, parse_start, parse_step
from bench_tasks.classroom import MAX_TOKENS, ThinkTime, parse_think_time
from bench_tasks.prompt import parse_size, size_label
from bench_tasks.stall import READ_TIMEOUT_S
from bench_tasks.suite import SCENARIOS, SuiteOptions
from bench_tasks.sweep import AUTO as AUTO_RATES
from bench_tasks.sweep import MAX_IN_FLIGHT, RateOptions, SweepOptions, parse_rates

RUN, QUICK, CAPACITY, SWEEP = "run", "quick", "capacity", "sweep"  # the llm-bench commands that measure
MEASURING = (RUN, QUICK, CAPACITY, SWEEP)
NONE = "none"  # --slo none: no SLO (a sweep's default)
CHAT_REQUESTS = "9"  # run chat and run paste: requests when --requests is not given
MAX_STOP_STRINGS = 4  # OpenAI's limit on `stop`; vLLM refuses every request that sends more (400)


def text(value: str) -> str:
    return value


def positive_int(value: str) -> int:
    return _positive(value, int, "a whole number of at least 1")


def _positive(value: str, parse: Callable[[str], int], wanted: str) -> int:
    try:
        number = parse(value.strip())
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"expected {wanted}, got {value!r}")
    return number


def positive_float(value: str) -> float:
    return _float(value, lambda number: number > 0, "a positive number")


def non_negative_float(value: str) -> float:
    return _float(value, lambda number: number >= 0, "a number of at least 0")


def _float(value: str, fits: Callable[[float], bool], wanted: str) -> float:
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not fits(number):  # NaN fits nothing
        raise ValueError(f"expected {wanted}, got {value!r}")
    return number


def _parts(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _positive_list(value: str, parse, example: str) -> tuple[int, ...]:
    try:
        found = tuple(parse(part) for part in _parts(value))
    except ValueError:
        found = ()
    if not found or min(found) < 1:
        raise ValueError(f"expected {example}, got {value!r}")
    return found


def sizes(value: str) -> tuple[int, ...]:
    """``4k,16k,32k`` -> (4096, 16384, 32768): prompt sizes in tokens."""
    return _positive_list(value, parse_size, "sizes like 4k,16k,32k or 1500")


def size(value: str) -> int:
    """``4k`` -> 4096: one prompt size in tokens."""
    return _positive(value, parse_size, "a size like 4k or 1500")


def share(value: str) -> float:
    """A share from 0 to 1."""
    return _float(value, lambda number: 0 <= number <= 1, "a share from 0 to 1")


def on_off(value: str) -> bool:
    if value.strip() not in ("on", "off"):
        raise ValueError(f"expected on or off, got {value!r}")
    return value.strip() == "on"


def counts(value: str) -> tuple[int, ...]:
    """``1,4,12``: how many requests at once."""
    return _positive_list(value, int, "counts like 1,4,12")


def scenarios(value: str) -> tuple[str, ...]:
    chosen = tuple(_parts(value))
    if not chosen or set(chosen) - set(SCENARIOS):
        raise ValueError(f"expected scenarios from {','.join(SCENARIOS)}, got {value!r}")
    return chosen


def seed(value: str) -> int:
    """A whole number of at least 0."""
    try:
        number = int(value.strip())
    except ValueError:
        number = -1
    if number < 0:
        raise ValueError(f"expected a whole number of at least 0, got {value!r}")
    return number


def slo(value: str) -> slos.Slo | None:
    """``ttft_p95=1.0,...``, or ``none`` (no SLO: a sweep's default)."""
    return None if value.strip().lower() == NONE else slos.parse(value)


def rates(value: str) -> tuple[float, ...] | str:
    """``1,2,4,8``, or ``auto`` (kept as ``auto``: a sweep to saturation)."""
    return parse_rates(value) or AUTO_RATES


def api(value: str) -> str:
    """``chat``, ``responses`` or ``messages``: the API every request of the run speaks."""
    if value.strip() not in apis.APIS:
        raise ValueError(f"expected one of {', '.join(apis.APIS)}, got {value!r}")
    return value.strip()


def step(value: str) -> str:
    """``x2`` or ``+4``, kept as written (SearchOptions reads it)."""
    parse_step(value)
    return value.strip()


@dataclass(frozen=True)
class Option:
    flag: str
    parse: Callable[[str], object]  # the text -> its value; ValueError with a one-line message
    default: str | bool | None  # as text (a switch: False); Locust's, and the commands' unless they say
    help: str
    commands: tuple[str, ...] = ()  # the llm-bench commands that take it
    web_ui: bool = False  # shown in the web UI's start form
    locust: bool = True  # on Locust's parser (its runs read it)
    handed: bool | None = None  # put on the argv a command hands to Locust (None: as ``locust``)
    handed_as: str | None = None  # the Locust flag it is handed as, where not its own
    switch: bool = False  # a flag without a value
    repeated: bool = False  # given once per value: a list
    most: int | None = None  # a repeated option: given at most this many times
    required: tuple[str, ...] = ()  # the commands that require it (Locust falls back on the default)
    command_default: str | None = None  # the commands' default, where it is not Locust's
    secret: bool = False  # never written into settings.json

    @property
    def name(self) -> str:
        return self.flag[2:].replace("-", "_")


SUITE, SEARCH, THINK = SuiteOptions(), SearchOptions(), ThinkTime()

OPTIONS: tuple[Option, ...] = (
    # -- the server, the run's files and labels: every measuring command --
    Option("--host", text, None, "base URL of the server, with or without /v1 (default: $OPENAI_BASE_URL, else "
           "start the simulated engine)", MEASURING, locust=False),  # Locust's own --host, given by run_locust
    Option("--out", text, "llm-bench-out", "output directory: the records, the run's other files and its report",
           MEASURING, required=MEASURING, handed=False),  # given by run_locust
    Option("--setup", text, "", "label of the serving setup (engine, model, card)", MEASURING, web_ui=True),
    Option("--engine", text, "auto", "engine profile (vllm, llamacpp, sglang, ollama, sim, generic), or auto: "
           "detected from the server", MEASURING, web_ui=True),
    Option("--model", text, "", "model name (default: the first in /v1/models)", MEASURING, web_ui=True),
    Option("--api-key", text, "", "API key (default: $OPENAI_API_KEY); sent only to --host", MEASURING,
           locust=False, secret=True),  # options are shown and sent to workers: Locust reads $OPENAI_API_KEY
    Option("--read-timeout", positive_float, f"{READ_TIMEOUT_S:g}", "seconds without a byte before a request counts "
           "as stalled", MEASURING),
    Option("--thinking", on_off, "off", "off: switch a thinking model's reasoning off (the engine profile's "
           "switch); on: let it think, as its users run it (ttfo_s then times the answer after the reasoning)",
           MEASURING, web_ui=True),
    Option("--api", api, apis.CHAT, "the API every request speaks, with the same conversation, tools and limits: "
           "chat (OpenAI Chat Completions, /v1/chat/completions), responses (OpenAI Responses, /v1/responses) or "
           "messages (Anthropic Messages, /v1/messages)", MEASURING, web_ui=True),
    Option("--fail-on-error", text, False, "exit 1 when a measured request failed (without it: exit 0, the "
           "failures are in the records)", MEASURING, locust=False, switch=True),
    Option("--repeat-mark", run_mark.parse, None, "send the texts of the earlier run with this mark again (its "
           "run_mark in settings.json and the records), on purpose: this run is meant to be served from that run's "
           "cache, to measure a warm cache, and its report says so (default: a new mark, so that nothing can be "
           "served from an earlier run's cache)", MEASURING, web_ui=True),
    Option("--run-mark", run_mark.parse, None, "the mark that opens every prompt of this run (llm-bench hands its "
           "own; default: drawn when the run starts, by the master for its workers)"),
    Option("--client-host", text, "", "name of this client machine in the records (default: its hostname)"),
    Option("--no-llm-report", text, False, "do not write the report into --out when a run ends", switch=True),
    # -- chat and paste (llm-bench run chat|paste, locustfiles/chat.py and paste.py) --
    Option("--users", positive_int, "1", "users asking at once (run paste: chatting, beside the one pasting)",
           (RUN,), locust=False),  # Locust's own -u
    Option("--requests", positive_int, None, "requests in total, then the run ends (run chat: default "
           f"{CHAT_REQUESTS}; run paste, paste.py: documents pasted, default {CHAT_REQUESTS}; run rate, rate.py: the "
           "schedule's requests, or --duration (with --dataset and neither: the file's requests); run chat --dataset: "
           "at most the file's, default all of them; run trace: the trace's first N, default all of them)", (RUN,),
           web_ui=True),
    Option("--question", text, None, "ask this instead of the three chat questions (repeat it for several); each "
           "is opened by the run's mark and a code of its own, so none is read from a cache",
           (RUN,), repeated=True),
    Option("--stop", text, None, f"end each answer at this stop string (OpenAI's `stop`; repeat it for up to "
           f"{MAX_STOP_STRINGS}; run paste: the chats' answers)",
           (RUN,), repeated=True, most=MAX_STOP_STRINGS),
    Option("--size", size, "4k", "run paste: tokens of each pasted document", (RUN,), locust=False, handed=True,
           handed_as="--paste-size"),  # paste.py's --paste-size, the classroom's too
    Option("--max-tokens", positive_int, str(MAX_TOKENS), "max_tokens per answer", (RUN, CAPACITY, SWEEP),
           web_ui=True),
    # -- the user's own traffic (bench_tasks/traffic; docs/reference.md#your-own-traffic-the-files-it-reads) --
    Option("--dataset", text, None, "run chat, run rate, sweep: send this file's requests instead of the chat "
           "questions: JSON lines of {\"prompt\"} or {\"messages\"} (with an optional max_tokens, sent with "
           "ignore_eos), or ShareGPT conversations replayed turn by turn with the model's own answers; run chat: "
           "each once, in order (--requests: at most that many; default: the whole file); run rate, sweep: what each "
           "arrival sends, each part of the run reading the file from its start, again when it runs out (run rate "
           "without --duration or --requests: the file's requests); capacity: the students' lessons, a "
           "conversation's human turns or a line's question", (RUN, SWEEP, CAPACITY), web_ui=True),
    Option("--file-answers", text, False, "--dataset with conversations: each turn after the file's answers, not "
           "the model's own", (RUN, SWEEP), web_ui=True, switch=True),
    Option("--prefix-tokens", positive_int, None, "run chat, run rate, sweep: open every request with a prefix of "
           "exactly this many tokens of the server's tokenizer, shared by the requests of its group (--prefixes)",
           (RUN, SWEEP), web_ui=True),
    Option("--prefixes", positive_int, None, "with --prefix-tokens: how many groups, each with its own prefix "
           "(request n in group n mod K; default 1)", (RUN, SWEEP), web_ui=True),
    Option("--trace", text, None, "a Mooncake trace to replay on its timestamps (llm-bench run trace FILE hands it)"),
    Option("--trace-summary", text, None, "what llm-bench's check of --trace found (JSON): Locust trusts it and "
           "does not read the whole file again before the replay (llm-bench run trace hands it)"),
    Option("--speed", positive_float, "1", "run trace: replay this many times faster than recorded (0.5: slower)",
           (RUN,), web_ui=True),
    Option("--block-tokens", positive_int, "512", "run trace: tokens per hash id of the trace (Mooncake's: 512)",
           (RUN,), web_ui=True),
    Option("--ignore-eos", text, False, "ask for exactly --max-tokens tokens (engines that accept ignore_eos)",
           (RUN, CAPACITY, SWEEP), web_ui=True, switch=True),
    # -- the open loop (llm-bench run rate, sweep; locustfiles/rate.py) --
    Option("--rate", positive_float, None, "run rate, rate.py: requests per second the schedule offers, whatever "
           "the server does", (RUN,), web_ui=True),
    Option("--duration", positive_float, None, "run rate, rate.py: seconds of the schedule (or --requests; rate.py "
           "without either: until stopped)", (RUN,), web_ui=True),
    Option("--arrivals", arrival_processes.parse, arrival_processes.POISSON, "the process between sends: poisson "
           "(exponential gaps), constant (every 1/R s) or gamma:CV (gamma gaps of coefficient of variation CV: "
           "above 1 bursty, gamma:1 is poisson)", (RUN, SWEEP), web_ui=True),
    Option("--seed", seed, "0", "the seed of the send times: the same seed offers the same schedule at a rate",
           (RUN, SWEEP), web_ui=True),
    Option("--max-in-flight", positive_int, str(MAX_IN_FLIGHT), "the most requests in flight (users) at once; a "
           "request due while all are busy waits and is sent late", (RUN, SWEEP), web_ui=True),
    Option("--rates", rates, None, "sweep, rate.py: the rates offered one after the other (requests/s, e.g. "
           "1,2,4,8), or auto: find the saturation rate with closed-loop floods, then 25, 50, 75, 90 and 100 "
           "percent of it",
           (SWEEP,), web_ui=True, command_default="auto"),
    Option("--window-s", positive_float, f"{SweepOptions.window_s:g}", "sweep: seconds each rate's measured window "
           "lasts at least (after --settle-s)", (SWEEP,), web_ui=True),
    Option("--probe-s", positive_float, f"{SweepOptions.probe_s:g}", "sweep --rates auto: seconds each closed-loop "
           "flood of the ladder to saturation is timed at least (after its first round)", (SWEEP,)),
    # -- the quick suite --
    Option("--runs", positive_int, str(SUITE.runs), "runs per test; bursts: rounds", (QUICK,), web_ui=True),
    Option("--sizes", sizes, ",".join(map(size_label, SUITE.sizes)), "fresh prompt sizes", (QUICK,), web_ui=True),
    Option("--needle-sizes", sizes, ",".join(map(size_label, SUITE.needle_sizes)), "needle prompt sizes", (QUICK,),
           web_ui=True),
    Option("--bursts", counts, ",".join(map(str, SUITE.bursts)), "requests released at once", (QUICK,), web_ui=True),
    Option("--only", scenarios, ",".join(SUITE.only), "the scenarios to run, in the suite's fixed order", (QUICK,),
           web_ui=True),
    # -- the classroom and the capacity search --
    Option("--slo", slo, "ttft_p95=1.0", "the goal each step is judged by, e.g. ttft_p95=1.0,decode_p5=10 "
           "(errors=0.01 allows one failed request in a hundred); run rate, sweep, rate.py: each request timed from "
           "when it was due, for goodput and the highest rate that met it (default: none)", (RUN, CAPACITY, SWEEP),
           web_ui=True,
           required=(CAPACITY,), command_default=NONE),
    Option("--think-time", parse_think_time, THINK.text(), "seconds a student thinks between "
           "an answer and the next question: a range drawn uniformly, or one value", (CAPACITY,), web_ui=True),
    Option("--paste-share", share, "0", "the share of questions (0 to 1) that carry a pasted document of "
           "--paste-size tokens, kept in the conversation as a chat page keeps it", (CAPACITY,), web_ui=True),
    Option("--paste-size", size, "4k", "tokens of each pasted document (paste.py: of each paste; run paste: "
           "--size)", (CAPACITY,), web_ui=True),
    Option("--start-students", parse_start, AUTO, "auto: probe the server (its slots, decode and prefill rates, "
           "answer lengths) in about a minute, predict the knee with a queueing model of the class and start there; "
           "or a number: the first class size, grown by --step", (CAPACITY,), web_ui=True),
    Option("--step", step, SEARCH.step, "with a numbered --start-students, how the class grows until the SLO "
           "breaks: x2 doubles it, +4 adds four", (CAPACITY,), web_ui=True),
    Option("--max-students", positive_int, str(SEARCH.max_students), "the largest class tried", (CAPACITY,),
           web_ui=True),
    Option("--resolution", positive_int, str(SEARCH.resolution), "refine until the last class that met the SLO "
           "and the first that missed it are this many students apart (1: exact)", (CAPACITY,), web_ui=True),
    Option("--step-s", positive_float, f"{SEARCH.step_s:g}", "seconds each step's judged window lasts at least",
           (CAPACITY,), web_ui=True),
    Option("--settle-s", non_negative_float, None, "seconds a new class settles before its window opens (default: "
           f"the top of --think-time); sweep: a new rate (default {SweepOptions.settle_s:g})", (CAPACITY, SWEEP)),
    Option("--min-requests", positive_int, str(SEARCH.min_requests), "questions each judged window holds at least "
           "(sweep: requests due in each rate's window)", (CAPACITY, SWEEP), web_ui=True),
    Option("--max-step-s", positive_float, None, "seconds a window that cannot tell yet (a goal's interval "
           "straddles its limit) goes on at most, then it is decided on its point estimate, sooner when holding on "
           "would not tell either (default: three times --step-s)", (CAPACITY,)),
    Option("--processes", positive_int, "1", "Locust processes on this machine; more when the client is saturated",
           (CAPACITY, SWEEP), locust=False, handed=True),  # Locust's own --processes
)
BY_NAME = {option.name: option for option in OPTIONS}


def _checked(option: Option) -> Callable[[str], str]:
    """argparse's ``type``: the text, kept as it is, once the option's parser has read it; its ValueError
    becomes argparse's one-line usage error."""
    def check(value: str) -> str:
        try:
            option.parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value
    return check


def _at_most(option: Option) -> type[argparse.Action]:
    """argparse's ``append``, refusing in one usage line the value that goes past ``option.most``."""
    class AppendAtMost(argparse._AppendAction):
        def __call__(self, parser, namespace, value, option_string=None):
            if option.most is not None and len(getattr(namespace, self.dest) or ()) >= option.most:
                raise argparse.ArgumentError(self, _too_many(option))
            super().__call__(parser, namespace, value, option_string)
    return AppendAtMost


def _too_many(option: Option) -> str:
    return f"at most {option.most} (OpenAI's limit: vLLM refuses every request that sends more)"


def _arguments(option: Option, default, required: bool = False) -> dict:
    if option.switch:
        return {"action": "store_true", "default": False, "help": option.help}
    shown = f" (default {default})" if default not in (None, "") and not required else ""
    kwargs = {"type": _checked(option), "default": default, "help": option.help + shown}
    kwargs |= {"action": _at_most(option)} if option.repeated else {}
    return kwargs | ({"required": True} if required else {})


def command_arguments(command: str) -> list[tuple[str, dict]]:
    """(flag, argparse keywords) of each option ``llm-bench COMMAND`` takes."""
    return [(o.flag, _arguments(o, o.command_default or o.default, command in o.required))
            for o in OPTIONS if command in o.commands]


def locust_arguments() -> list[tuple[str, dict]]:
    """(flag, argparse keywords) of each option on Locust's parser, ``include_in_web_ui`` included."""
    return [(o.flag, {**_arguments(o, o.default), "include_in_web_ui": o.web_ui}) for o in OPTIONS if o.locust]


def locust_argv(namespace, command: str) -> list[str]:
    """What ``llm-bench COMMAND`` hands to Locust: each option it takes and Locust reads, when not Locust's default."""
    argv = []
    for option in OPTIONS:
        handed = option.locust if option.handed is None else option.handed
        if command not in option.commands or not handed:
            continue
        given = getattr(namespace, option.name)
        flag = option.handed_as or option.flag
        if option.switch:
            argv += [flag] if given else []
        elif option.repeated:
            argv += [part for value in given or () for part in (flag, value)]
        elif given is not None and given != option.default:
            argv += [flag, str(given)]
    return argv


def given(command: str, **texts) -> SimpleNamespace:
    """The namespace ``llm-bench COMMAND`` parses when only these options are given (as text)."""
    defaults = {o.name: False if o.switch else None if o.repeated else o.command_default or o.default
                for o in OPTIONS if command in o.commands}
    return SimpleNamespace(**{**defaults, **texts})


def settings(namespace, command: str) -> dict:
    """``settings.json``'s options: each one ``llm-bench COMMAND`` takes, as given (no secret)."""
    return {o.name: getattr(namespace, o.name) for o in OPTIONS if command in o.commands and not o.secret}


class Values(SimpleNamespace):
    """The options of a run, typed."""

    @property
    def mark(self) -> str | None:
        """The mark that opens this run's prompts: the one repeated on purpose, else the run's own."""
        return getattr(self, "repeat_mark", None) or getattr(self, "run_mark", None)

    def suite(self, scenarios: tuple[str, ...] = SCENARIOS) -> SuiteOptions:
        """The quick suite's options, for the scenarios a locustfile has users for."""
        return SuiteOptions(runs=self.runs, sizes=self.sizes, needle_sizes=self.needle_sizes, bursts=self.bursts,
                            only=tuple(s for s in self.only if s in scenarios))

    def search(self) -> SearchOptions:
        """The capacity search's options; ValueError when they contradict each other."""
        if self.slo is None:
            raise ValueError("--slo: the capacity search judges each class by an SLO, e.g. ttft_p95=1.0")
        settle_s = self.think_time.max_s if self.settle_s is None else self.settle_s
        return SearchOptions(start=self.start_students, step=self.step, max_students=self.max_students,
                             resolution=self.resolution, step_s=self.step_s, settle_s=settle_s,
                             min_requests=self.min_requests, max_step_s=self.max_step_s,
                             read_timeout_s=self.read_timeout)

    def open_loop(self) -> RateOptions | SweepOptions:
        """The open loop's plan options: a sweep with ``--rates``, else one rate (ValueError without ``--rate``,
        or when they contradict each other)."""
        if getattr(self, "rates", None) is not None:  # run rate takes no --rates
            settle = {} if self.settle_s is None else {"settle_s": self.settle_s}
            return SweepOptions(rates=None if self.rates == AUTO_RATES else self.rates, arrivals=self.arrivals,
                                seed=self.seed, window_s=self.window_s, min_requests=self.min_requests,
                                max_in_flight=self.max_in_flight, probe_s=self.probe_s, **settle)
        if self.rate is None:
            raise ValueError("--rate: an open loop offers requests at a rate, e.g. --rate 4 (or a sweep: --rates)")
        if self.duration is not None and self.requests is not None:
            raise ValueError("--duration: a run at one rate lasts --duration S or --requests N, not both")
        return RateOptions(self.rate, self.arrivals, self.seed, self.duration, self.requests, self.max_in_flight)


def values(namespace, command: str | None = None) -> Values:
    """The typed values of a parsed namespace: ``llm-bench COMMAND``'s, or with no command Locust's. ValueError
    (naming the option) for a text its parser refuses."""
    chosen = [o for o in OPTIONS if (command in o.commands if command else o.locust)]
    return Values(**{o.name: value(o, getattr(namespace, o.name)) for o in chosen})


def value(option: Option, given):
    if option.switch:
        return bool(given)
    if option.repeated:
        if option.most is not None and len(given or ()) > option.most:
            raise ValueError(f"{option.flag}: {_too_many(option)}")
        return tuple(_read(option, item) for item in given or ())
    if given is None or (given == "" and option.default is None):  # an empty field of the start form
        return None
    return _read(option, str(given))


def _read(option: Option, given: str):
    try:
        return option.parse(given)
    except ValueError as exc:
        raise ValueError(f"{option.flag}: {exc}") from None
