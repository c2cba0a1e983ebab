"""llm-bench: a thin command line over bench_tasks, Locust and the analysis.

    llm-bench run chat [--host URL] [--users N] [--requests N] [--setup LABEL] --out DIR
    llm-bench quick [--host URL] [--setup LABEL] [--runs N] [--sizes 4k,16k,32k] ... --out DIR
    llm-bench capacity [--host URL] --slo ttft_p95=1.0 [--think-time 10-40] [--start-students auto] ... --out DIR
    llm-bench report DIR
    llm-bench compare DIR1 DIR2 ... [--labels A,B] --out OUT
    llm-bench selftest [--small] [--out DIR]
    llm-bench sim [--port 8000] [simulated engine options]
    llm-bench locustfile [NAME]

Exit status: 0 done; 1 a measured request failed (--fail-on-error); 2 the command could not start
(a usage mistake, an unreachable or odd server, a damaged install); 3 the run started and failed
(failure.json says why); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import locustfiles
from bench_tasks import run_failure, server, stall
from bench_tasks import slo as slos
from bench_tasks.capacity import AUTO, SearchOptions, parse_start, parse_step
from bench_tasks.classroom import parse_think_time
from bench_tasks.prompt import parse_size
from bench_tasks.suite import SCENARIOS
from llm_bench import headless, progress, selftest
from llm_bench.headless import RunFailed, UsageError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sim"]:
        return run_sim_args(argv[1:])  # the simulated engine parses its own options, --help included
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(at_the_edge(args), argv)
    except UsageError as exc:
        print(f"llm-bench: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:  # a run whose command does not report on it (selftest)
        print(f"llm-bench: {exc}", file=sys.stderr)
        return run_failure.EXIT_CODE
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llm-bench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run one workload headless and print a summary")
    run.add_argument("workload", choices=["chat"])
    add_target_options(run)
    run.add_argument("--users", type=_positive_int, default=1, help="concurrent users (default 1)")
    run.add_argument("--requests", type=_positive_int, default=9, help="requests in total (default 9)")
    run.add_argument("--max-tokens", type=_positive_int, default=256)
    run.add_argument("--ignore-eos", action="store_true",
                     help="ask for exactly --max-tokens tokens (engines that accept ignore_eos)")
    run.add_argument("--question", action="append", default=[],
                     help="ask this instead of the three chat questions (repeat the option for several)")
    run.add_argument("--stop", action="append", default=[],
                     help="end each answer at this stop string (OpenAI's `stop`; repeat the option for several)")
    run.set_defaults(handler=run_chat)

    quick = commands.add_parser("quick", help="run the quick suite headless, then write its report")
    add_target_options(quick)
    add_suite_options(quick)
    quick.set_defaults(handler=run_quick)

    capacity = commands.add_parser("capacity", help="find the largest class of students that meets an SLO")
    add_target_options(capacity)
    add_capacity_options(capacity)
    capacity.set_defaults(handler=run_capacity)

    report = commands.add_parser("report", help="write summary.md/.csv, charts and report.html for a run")
    report.add_argument("run_dir", help="a run's output directory")
    report.set_defaults(handler=run_report)

    compare = commands.add_parser("compare", help="several setups side by side")
    compare.add_argument("run_dirs", nargs="+", help="run directories, one per setup")
    compare.add_argument("--labels", default="", help="comma-separated labels (default: each run's --setup)")
    compare.add_argument("--out", required=True, help="output directory")
    compare.set_defaults(handler=run_compare)

    selftest.add_parser(commands)

    sim = commands.add_parser("sim", help="serve the simulated engine (an OpenAI-compatible server)")
    sim.add_argument("sim_args", nargs=argparse.REMAINDER, help="its options: `llm-bench sim --help`")
    sim.set_defaults(handler=run_sim)

    locustfile = commands.add_parser("locustfile", help="print the path of an installed locustfile, for "
                                                        "`locust -f` (without NAME: list them)")
    locustfile.add_argument("name", nargs="?", help=f"one of {', '.join(locustfiles.RUNNABLE)}")
    locustfile.set_defaults(handler=run_locustfile)
    return parser


def at_the_edge(args: argparse.Namespace) -> argparse.Namespace:
    """Paths made absolute and the host made a base URL, once: nothing past here depends on the
    working directory (Locust runs in the output directory) or on how the URL was spelled."""
    for name in ("out", "run_dir"):
        if getattr(args, name, None):
            setattr(args, name, str(Path(getattr(args, name)).resolve()))
    if getattr(args, "run_dirs", None):
        args.run_dirs = [str(Path(d).resolve()) for d in args.run_dirs]
    if hasattr(args, "host"):
        host = args.host or os.environ.get("OPENAI_BASE_URL", "")
        args.host = server.base_url(host) if host else None
    return args


def add_target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="base URL of the server, with or without /v1 (default: $OPENAI_BASE_URL, "
                                       "else start the simulated engine)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--setup", default="", help="label of the serving setup (engine, model, card)")
    parser.add_argument("--engine", default="auto", help="engine profile (default: auto-detect)")
    parser.add_argument("--model", default="", help="model name (default: the first in /v1/models)")
    parser.add_argument("--api-key", default="", help="API key (default: $OPENAI_API_KEY); sent only to --host")
    parser.add_argument("--read-timeout", type=_positive_float, default=300.0,
                        help="seconds without a byte before a request counts as stalled (default 300)")
    parser.add_argument("--fail-on-error", action="store_true",
                        help="exit 1 when a measured request failed (default: exit 0, failures are in the records)")


def add_suite_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=_positive_int, default=3, help="runs per test; bursts: rounds (default 3)")
    parser.add_argument("--sizes", type=_sizes, default="4k,16k,32k", help="fresh prompt sizes (default 4k,16k,32k)")
    parser.add_argument("--needle-sizes", type=_sizes, default="32k,128k", help="needle prompt sizes (default 32k,128k)")
    parser.add_argument("--bursts", type=_counts, default="1,4,12", help="simultaneous requests (default 1,4,12)")
    parser.add_argument("--only", type=_scenarios, default=",".join(SCENARIOS),
                        help=f"scenarios to run (default {','.join(SCENARIOS)})")


def add_capacity_options(parser: argparse.ArgumentParser) -> None:
    defaults = SearchOptions()
    parser.add_argument("--slo", type=_slo, required=True,
                        help="the goal each step is judged by, e.g. ttft_p95=1.0,decode_p5=10 (errors=0.01 allows "
                             "1%% failed requests; default 0)")
    parser.add_argument("--think-time", type=_think_time, default="10-40",
                        help="seconds a student thinks between an answer and the next question: a range drawn "
                             "uniformly, or one value (default 10-40)")
    parser.add_argument("--max-tokens", type=_positive_int, default=256, help="max_tokens per answer (default 256)")
    parser.add_argument("--ignore-eos", action="store_true",
                        help="ask for exactly --max-tokens tokens (engines that accept ignore_eos)")
    parser.add_argument("--start-students", type=_start, default=AUTO,
                        help="auto (the default): probe the server (its slots, decode and prefill rates, answer "
                             "lengths) in about a minute, predict the knee with a queueing model of the class and "
                             "start there; or a number: the first class size, grown by --step")
    parser.add_argument("--step", type=_step, default=defaults.step,
                        help=f"with a numbered --start-students: how the class grows until the SLO breaks: x2 "
                             f"doubles it, +4 adds four (default {defaults.step})")
    parser.add_argument("--max-students", type=_positive_int, default=defaults.max_students,
                        help=f"the largest class tried (default {defaults.max_students})")
    parser.add_argument("--resolution", type=_positive_int, default=defaults.resolution,
                        help="refine until the last class that met the SLO and the first that missed it are this "
                             f"many students apart (default {defaults.resolution}: exact)")
    parser.add_argument("--step-s", type=_positive_float, default=defaults.step_s,
                        help=f"seconds each step's judged window lasts at least (default {defaults.step_s:g})")
    parser.add_argument("--settle-s", type=_non_negative_float, default=None,
                        help="seconds a new class settles before its window opens (default: the top of "
                             "--think-time)")
    parser.add_argument("--min-requests", type=_positive_int, default=defaults.min_requests,
                        help=f"questions each judged window holds at least (default {defaults.min_requests})")
    parser.add_argument("--max-step-s", type=_positive_float, default=None,
                        help="seconds a window that cannot tell yet (a goal's 90%% interval straddles its limit) goes "
                             "on at most, then it is decided on its point estimate (default: three times --step-s)")
    parser.add_argument("--processes", type=_positive_int, default=1,
                        help="Locust processes on this machine (default 1); more when the client is saturated")


def capacity_locust_args(args) -> list[str]:
    extra = ["--slo", args.slo, "--think-time", args.think_time, "--max-tokens", str(args.max_tokens),
             "--start-students", str(args.start_students), "--step", args.step,
             "--max-students", str(args.max_students), "--resolution", str(args.resolution),
             "--step-s", str(args.step_s), "--min-requests", str(args.min_requests)]
    extra += ["--settle-s", str(args.settle_s)] if args.settle_s is not None else []
    extra += ["--max-step-s", str(args.max_step_s)] if args.max_step_s is not None else []
    extra += ["--ignore-eos"] if args.ignore_eos else []
    return extra + (["--processes", str(args.processes)] if args.processes > 1 else [])


def suite_locust_args(args) -> list[str]:
    return ["--runs", str(args.runs), "--sizes", args.sizes, "--needle-sizes", args.needle_sizes,
            "--bursts", args.bursts, "--only", args.only]


def common_locust_args(args) -> list[str]:
    extra = ["--setup", args.setup, "--engine", args.engine, "--read-timeout", str(args.read_timeout)]
    if args.model:
        extra += ["--model", args.model]
    return extra


def run_chat(args, argv: list[str]) -> int:
    extra = ["--llm-requests", str(args.requests), "--max-tokens", str(args.max_tokens)]
    extra += ["--ignore-eos"] if args.ignore_eos else []
    extra += [arg for question in args.question for arg in ("--chat-question", question)]
    extra += [arg for stop in args.stop for arg in ("--chat-stop", stop)]
    run = measure(args, argv, "chat.py", args.users, extra, {"workload": "chat"},
                  progress.chat_plan(args.requests, args.users))
    return exit_status(args, run)


def run_quick(args, argv: list[str]) -> int:
    started = time.perf_counter()
    run = measure(args, argv, "quick_suite.py", 1, suite_locust_args(args),
                  {"workload": "quick", "suite": vars_for_settings(args)}, progress.SUITE_PLAN)
    print(f"suite ran in {time.perf_counter() - started:.0f} s")
    write_report(run)
    return exit_status(args, run)


def run_capacity(args, argv: list[str]) -> int:
    from analysis import capacity, load

    if args.start_students != AUTO and int(args.start_students) > args.max_students:
        raise UsageError(f"--start-students {args.start_students} is above --max-students {args.max_students}")
    if args.max_step_s is not None and args.max_step_s < args.step_s:
        raise UsageError(f"--max-step-s {args.max_step_s:g} is shorter than --step-s {args.step_s:g}")
    settings = {"workload": "capacity", "capacity": {k: getattr(args, k) for k in CAPACITY_SETTINGS}}
    started = time.perf_counter()
    run = measure(args, argv, "capacity.py", 1, capacity_locust_args(args), settings, progress.SUITE_PLAN,
                  run_time_s=SEARCH_RUN_TIME_S, idle_s=parse_think_time(args.think_time).max_s)
    print(f"search ran in {time.perf_counter() - started:.0f} s")
    if run.recorded:
        records, _info = load.load_run(run.out_dir)
        slo = slos.parse(args.slo)
        steps = capacity.steps(records, slo)
        print(capacity.format_steps(steps, slo))
        print(capacity.conclusion(steps, slo))
    write_report(run)
    return exit_status(args, run)


CAPACITY_SETTINGS = ("slo", "think_time", "max_tokens", "ignore_eos", "start_students", "step", "max_students",
                     "resolution", "step_s", "settle_s", "min_requests", "max_step_s", "processes", "setup", "engine",
                     "model", "read_timeout")
SEARCH_RUN_TIME_S = 7 * 24 * 3600  # the search ends by itself; Locust's own run-time limit must not cut it


@dataclass(frozen=True)
class Measured:
    out_dir: Path
    failed_requests: int  # measured requests that failed (their error classes are in the records)
    recorded: bool  # the run wrote records (a run that failed at its start wrote none)
    failure: RunFailed | None = None  # the run failed (failure.json)


def measure(args, argv: list[str], locustfile: str, users: int, extra: list[str], settings: dict,
            plan: progress.Plan, run_time_s: int = 3600, idle_s: float = 0.0) -> Measured:
    """The measuring commands' common path: the target, its settings, Locust headless, a summary.
    A run that failed still gets its summary, from the records it kept."""
    from analysis import load, overview, records as record_sets, study

    out_dir = headless.prepare_out_dir(args.out)
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY", "")
    headless.check_engine(args.engine)
    failure = None
    with headless.target_server(args.host, out_dir) as url:
        models = headless.check_server(url, api_key, args.model)
        headless.write_settings(out_dir, url, models, ["llm-bench", *argv], api_key, settings)
        print(f"measuring {url}" + ("" if args.host else " (the built-in simulated engine)"), flush=True)
        try:
            headless.run_locust(locustfile, url, out_dir, users, common_locust_args(args) + extra, api_key,
                                run_time_s=run_time_s, watch=plan,
                                stall_s=stall.backstop_s(args.read_timeout, idle_s))
        except RunFailed as exc:
            failure = exc
    try:
        records, _info = load.load_run(out_dir)
    except load.RunDirError:
        if failure is not None:
            return Measured(out_dir, 0, False, failure)
        raise UsageError(f"the run wrote no records; see {out_dir / 'locust.log'}") from None
    print(overview.format_overview(overview.overview(records)))
    for warning in study.warnings(records):
        print(f"warning: {warning}")
    print(f"records: {out_dir / 'requests.csv'}")
    return Measured(out_dir, len(record_sets.failed(record_sets.measured(records))), True, failure)


def write_report(run: Measured) -> None:
    from analysis import report

    if run.recorded:
        for path in report.write_report(run.out_dir):
            print(f"report: {path}")


def exit_status(args, run: Measured) -> int:
    """3 when the run failed (one line says why); else 0 unless --fail-on-error and a measured request
    failed (its class is in the records)."""
    if run.failure is not None:
        print(f"llm-bench: {run.failure}", file=sys.stderr)
        return run_failure.EXIT_CODE
    if run.failed_requests and args.fail_on_error:
        print(f"llm-bench: {run.failed_requests} measured request(s) failed (--fail-on-error)", file=sys.stderr)
        return 1
    return 0


def vars_for_settings(args) -> dict:
    keys = ("runs", "sizes", "needle_sizes", "bursts", "only", "setup", "engine", "model", "read_timeout")
    return {key: getattr(args, key) for key in keys}


def run_report(args, argv: list[str]) -> int:
    from analysis import load, report

    try:
        paths = report.write_report(Path(args.run_dir))
    except load.RunDirError as exc:
        raise UsageError(str(exc)) from None
    for path in paths:
        print(path)
    return 0


def run_compare(args, argv: list[str]) -> int:
    from analysis import load, report

    labels = [label.strip() for label in args.labels.split(",")] if args.labels else None
    if labels and len(labels) != len(args.run_dirs):
        raise UsageError(f"--labels names {len(labels)} setups but {len(args.run_dirs)} directories were given")
    out_dir = headless.prepare_report_dir(args.out)
    try:
        paths = report.write_compare([Path(d) for d in args.run_dirs], labels, out_dir)
    except load.RunDirError as exc:
        raise UsageError(str(exc)) from None
    for path in paths:
        print(path)
    return 0


def run_locustfile(args, argv: list[str]) -> int:
    """The path of one installed locustfile (for `locust -f "$(llm-bench locustfile NAME)"`), or the list."""
    if args.name:
        print(headless.locustfile_path(args.name))
        return 0
    folder = headless.locustfile_path(locustfiles.RUNNABLE[0]).parent
    print(f"locustfiles in {folder} (llm-bench locustfile NAME prints one's path):")
    width = max(len(name) for name in locustfiles.RUNNABLE)
    for name in locustfiles.RUNNABLE:
        print(f"  {name:<{width}}  {locustfiles.summary(name)}")
    return 0


def run_sim(args, argv: list[str]) -> int:
    return run_sim_args(args.sim_args)


def run_sim_args(sim_args: list[str]) -> int:
    import simengine.__main__ as sim_main

    return sim_main.main(sim_args, prog="llm-bench sim") or 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _sizes(text: str) -> str:
    try:
        sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected sizes like 4k,16k,32k or 1500, got {text!r}")
    return text


def _counts(text: str) -> str:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected counts like 1,4,12, got {text!r}")
    return text


def _scenarios(text: str) -> str:
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [s for s in chosen if s not in SCENARIOS]
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(f"scenarios are {','.join(SCENARIOS)}; got {text!r}")
    return ",".join(chosen)


def _checked_by(parse):
    """An argparse type that keeps the text and turns ``parse``'s ValueError into a one-line usage error."""
    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text
    return check


_slo, _think_time, _step = _checked_by(slos.parse), _checked_by(parse_think_time), _checked_by(parse_step)
_start = _checked_by(parse_start)


def _non_negative_float(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


if __name__ == "__main__":
    sys.exit(main())
