"""llm-bench: a thin command line over bench_tasks, Locust and the analysis.

    llm-bench run chat [--host URL] [--users N] [--requests N] [--dataset FILE] [--setup LABEL] --out DIR
    llm-bench run trace FILE [--host URL] [--speed X] [--block-tokens 512] [--requests N] --out DIR
    llm-bench run paste [--host URL] [--users N] [--size 4k] [--requests N] --out DIR
    llm-bench quick [--host URL] [--setup LABEL] [--runs N] [--sizes 4k,16k,32k] ... --out DIR
    llm-bench capacity [--host URL] --slo ttft_p95=1.0 [--think-time 10-40] [--dataset FILE] ... --out DIR
    llm-bench run rate [--host URL] --rate R (--duration S | --requests N) [--dataset FILE] ... --out DIR
    llm-bench sweep [--host URL] [--rates 1,2,4,8 | auto] [--slo ttft_p95=1.0] [--dataset FILE] ... --out DIR
    llm-bench report DIR  |  llm-bench report PATH... --out DIR
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
from bench_tasks import engine, options, run_failure, run_mark, server, stall, tokens
from bench_tasks.traffic import replay
from bench_tasks.traffic.dataset import Dataset
from bench_tasks.traffic.items import TrafficError
from bench_tasks.traffic.prefixes import SharedPrefixes
from bench_tasks.traffic.trace import Trace
from bench_tasks.traffic.vocabulary import TokenizerError
from bench_tasks.traffic.vocabulary import measure as measure_vocabulary
from llm_bench import gathering, headless, progress, selftest
from llm_bench.headless import RunFailed, UsageError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sim"]:
        return run_sim_args(argv[1:])  # the simulated engine parses its own options, --help included
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args.handler(at_the_edge(args), argv)
        sys.stdout.flush()  # inside the try: a reader gone before the last line is seen here
        return status
    except UsageError as exc:
        print(f"llm-bench: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:  # a run whose command does not report on it (selftest)
        print(f"llm-bench: {exc}", file=sys.stderr)
        return run_failure.EXIT_CODE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `llm-bench locustfile | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141  # what a shell reports for a command ended by SIGPIPE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llm-bench", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run one workload headless and print a summary")
    run.add_argument("workload", choices=["chat", "paste", "rate", "trace"])
    run.add_argument("file", nargs="?", metavar="FILE", help="run trace: the Mooncake trace (JSON lines) to replay")
    add_options(run, options.RUN, run_workload)
    add_options(commands.add_parser("quick", help="run the quick suite headless, then write its report"),
                options.QUICK, run_quick)
    add_options(commands.add_parser("capacity", help="find the largest class of students that meets an SLO"),
                options.CAPACITY, run_capacity)
    add_options(commands.add_parser("sweep", help="offer rates one after the other (open loop), up to saturation"),
                options.SWEEP, run_sweep)

    report = commands.add_parser("report", help="write summary.md/.csv, charts and report.html for a run")
    report.add_argument("paths", nargs="+", metavar="PATH",
                        help="a run's output directory; with --out, the workers' own files (worker-HOST-PID.jsonl) of "
                             "a run whose master was lost, and the directories holding them or the master's files")
    report.add_argument("--out", help="the directory the PATHs' files are copied into and the report written to")
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
    if getattr(args, "out", None):
        args.out = str(Path(args.out).resolve())
    for name in ("dataset", "file"):  # kept as given (the messages name them so), handed to Locust resolved
        if getattr(args, name, None):
            setattr(args, f"{name}_path", str(Path(getattr(args, name)).resolve()))
    for name in ("run_dirs", "paths"):
        if getattr(args, name, None):
            setattr(args, name, [str(Path(d).resolve()) for d in getattr(args, name)])
    if hasattr(args, "host"):
        host = args.host or os.environ.get("OPENAI_BASE_URL", "")
        args.host = server.base_url(host) if host else None
    return args


def add_options(parser: argparse.ArgumentParser, command: str, handler) -> None:
    for flag, arguments in options.command_arguments(command):
        parser.add_argument(flag, **arguments)
    parser.set_defaults(handler=handler)


def run_workload(args, argv: list[str]) -> int:
    only_for_its_workload(args)
    return {"paste": run_paste, "rate": run_rate, "trace": run_trace}.get(args.workload, run_chat)(args, argv)


# Options of some workloads of `run` (their defaults as parsed: another workload refuses any other value).
OWN_TRAFFIC = ("chat", "rate")
WORKLOAD_OPTIONS = {"file": (("trace",), None), "dataset": (OWN_TRAFFIC, None), "file_answers": (OWN_TRAFFIC, False),
                    "prefix_tokens": (OWN_TRAFFIC, None), "prefixes": (OWN_TRAFFIC, None), "speed": (("trace",), "1"),
                    "block_tokens": (("trace",), "512")}


def only_for_its_workload(args) -> None:
    for name, (workloads, default) in WORKLOAD_OPTIONS.items():
        if args.workload not in workloads and getattr(args, name) != default:
            what = "FILE" if name == "file" else "--" + name.replace("_", "-")
            raise UsageError(f"{what} is for run {' and run '.join(workloads)}, not run {args.workload}"
                             + (" (run chat sends a file of prompts with --dataset FILE)" if name == "file" else ""))
    if args.workload == "trace" and not args.file:
        raise UsageError("run trace replays a Mooncake trace: llm-bench run trace FILE --out DIR")
    traffic_options_agree(args)


def traffic_options_agree(args) -> None:
    if args.file_answers and not args.dataset:
        raise UsageError("--file-answers replays a --dataset of conversations with the file's answers: give --dataset")
    if args.prefixes and not args.prefix_tokens:
        raise UsageError("--prefixes K groups requests by a prefix of --prefix-tokens N tokens: give --prefix-tokens")


# Without --host, run paste measures the simulated engine reading prompts as llama.cpp does (batches of its
# default 2048 tokens between the decode steps of the other slots) at a slow engine's 4000 prompt tokens a
# second: a 4k paste is read in two half-second batches, and every streaming answer stops for each.
PASTE_SIM = {"prefill_mode": "batched", "n_batch": 2048, "prefill_tps": 4000.0}


def run_paste(args, argv: list[str]) -> int:
    from bench_tasks.paste import paste_phase

    args.requests = args.requests or options.CHAT_REQUESTS
    given = options.values(args, options.RUN)
    plan = progress.Plan(((paste_phase(given.size), given.requests),), given.users + 1)
    run = measure(args, argv, "paste.py", given.users + 1, plan, sim_options=PASTE_SIM)
    write_report(run)
    return exit_status(args, run)


def run_chat(args, argv: list[str]) -> int:
    requests = int(options.CHAT_REQUESTS)
    dataset = open_dataset(args)  # checked whole: nothing is sent if it is wrong
    if dataset is not None:
        requests = min(int(args.requests), dataset.request_count) if args.requests else dataset.request_count
    args.requests = str(int(args.requests or requests))
    given = options.values(args, options.RUN)
    check = prefix_check(given.prefix_tokens, given.prefixes) if given.prefix_tokens else None
    run = measure(args, argv, "chat.py", given.users, progress.chat_plan(given.requests, given.users), check=check)
    return exit_status(args, run)


def run_trace(args, argv: list[str]) -> int:
    from analysis import load, rates, traffic

    given = options.values(args, options.RUN)
    trace = traffic_file(lambda: Trace.open(args.file, given.block_tokens))  # the whole file, in one pass
    requests = min(given.requests or trace.summary.requests, trace.summary.requests)
    args.requests = str(requests)
    span_s = trace.summary.span_s / given.speed
    print(f"trace {args.file}: {trace.summary.requests} requests over {span_s:.1f} s at --speed {given.speed:g}"
          + (f"; replaying the first {requests}" if requests < trace.summary.requests else ""), flush=True)

    def check(count) -> None:
        replay.ready(trace, count, "check")

    run = measure(args, argv, "trace.py", 1, progress.SUITE_PLAN, run_time_s=SEARCH_RUN_TIME_S, idle_s=span_s,
                  check=check, handed=["--trace", args.file_path, "--trace-summary", replay.summary_text(trace)])
    if run.recorded:
        records, _info = load.load_run(run.out_dir)
        print(traffic.format_replay(rates.steps(records)))
        print(traffic.format_reuse(traffic.reuse(records)))
    write_report(run)
    return exit_status(args, run)


def traffic_file(open_it):
    """A file of traffic opened (checked whole); its problems, by file and line, are a usage error (exit 2)."""
    try:
        return open_it()
    except TrafficError as exc:
        raise UsageError(str(exc)) from None


def prefix_check(prefix_tokens: int, prefixes: int | None):
    """The check of --prefix-tokens on the server before anything is sent: its tokenizer can count exact
    prefixes, and N is more than the tokens a prefix opens with."""
    def check(count) -> None:
        SharedPrefixes(measure_vocabulary(count), "check", prefix_tokens, prefixes or 1)
    return check


def run_quick(args, argv: list[str]) -> int:
    started = time.perf_counter()
    run = measure(args, argv, "quick_suite.py", 1, progress.SUITE_PLAN)
    print(f"suite ran in {time.perf_counter() - started:.0f} s")
    write_report(run)
    return exit_status(args, run)


def run_capacity(args, argv: list[str]) -> int:
    from analysis import capacity, load

    open_dataset(args)
    given = options.values(args, options.CAPACITY)
    try:
        given.search()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    started = time.perf_counter()
    run = measure(args, argv, "capacity.py", 1, progress.SUITE_PLAN, run_time_s=SEARCH_RUN_TIME_S,
                  idle_s=given.think_time.max_s)
    print(f"search ran in {time.perf_counter() - started:.0f} s")
    if run.recorded:
        records, _info = load.load_run(run.out_dir)
        steps = capacity.steps(records, given.slo, load.load_overdue(run.out_dir))
        print(capacity.format_steps(steps, given.slo))
        print(capacity.conclusion(steps, given.slo))
    write_report(run)
    return exit_status(args, run)


SEARCH_RUN_TIME_S = 7 * 24 * 3600  # the search ends by itself; Locust's own run-time limit must not cut it


def run_rate(args, argv: list[str]) -> int:
    """An open loop at one rate (locustfiles/rate.py): the schedule, then its table and warnings. With --dataset
    and neither --duration nor --requests, as many requests as the file holds."""
    dataset = open_dataset(args)
    if dataset is not None and args.duration is None and args.requests is None:
        args.requests = str(dataset.request_count)
    given = options.values(args, options.RUN)
    if given.rate is None or (given.duration is None) == (given.requests is None):
        raise UsageError("run rate needs --rate R and one of --duration S or --requests N")
    return run_open_loop(args, argv, given.slo)


def run_sweep(args, argv: list[str]) -> int:
    """Rates one after the other (locustfiles/rate.py), to saturation with --rates auto; the table per rate,
    goodput and the highest rate that met the SLO."""
    traffic_options_agree(args)
    open_dataset(args)
    return run_open_loop(args, argv, options.values(args, options.SWEEP).slo)


def open_dataset(args) -> Dataset | None:
    """--dataset checked whole before anything is sent (its problems: exit 2), then handed to Locust resolved."""
    if not args.dataset:
        return None
    dataset = traffic_file(lambda: Dataset.open(args.dataset))
    args.dataset = args.dataset_path
    return dataset


def run_open_loop(args, argv: list[str], slo) -> int:
    from analysis import load, rates, traffic

    given = options.values(args, args.command)
    try:
        given.open_loop()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    check = prefix_check(given.prefix_tokens, given.prefixes) if given.prefix_tokens else None
    started = time.perf_counter()
    run = measure(args, argv, "rate.py", 1, progress.SUITE_PLAN, run_time_s=SEARCH_RUN_TIME_S, check=check)
    print(f"open loop ran in {time.perf_counter() - started:.0f} s")
    if run.recorded:
        records, _info = load.load_run(run.out_dir)
        print(rates.format_steps(rates.steps(records, slo)))
        for line in rates.conclusion(records, slo):
            print(line)
        reuse = traffic.reuse(records)
        if len(reuse):
            print(traffic.format_reuse(reuse))
    write_report(run)
    return exit_status(args, run)


@dataclass(frozen=True)
class Measured:
    out_dir: Path
    failed_requests: int  # measured requests that failed (their error classes are in the records)
    recorded: bool  # the run wrote records (a run that failed at its start wrote none)
    failure: RunFailed | None = None  # the run failed (failure.json)


def measure(args, argv: list[str], locustfile: str, users: int, plan: progress.Plan, run_time_s: int = 3600,
            idle_s: float = 0.0, sim_options: dict | None = None, check=None, handed: list[str] = ()) -> Measured:
    """The measuring commands' common path: the target, its settings, Locust headless, a summary.
    A run that failed still gets its summary, from the records it kept. ``sim_options``: the simulated
    engine's settings when it is started for the run (no --host). ``check(count_tokens)``: what must hold
    of the server before anything is sent (a ValueError, TrafficError or TokenizerError: exit 2).
    ``handed``: more of Locust's options."""
    from analysis import load, overview, rates, records as record_sets, study

    out_dir = headless.prepare_out_dir(args.out)
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY", "")
    headless.check_engine(args.engine)
    given = options.values(args, args.command)
    mark = given.repeat_mark or run_mark.draw()  # one per invocation, handed to Locust and through it to its workers
    settings = {"workload": getattr(args, "workload", args.command), "options": options.settings(args, args.command),
                "run_mark": mark}
    handed = [*options.locust_argv(args, args.command), *handed] + ([] if given.repeat_mark else ["--run-mark", mark])
    failure = None
    with headless.target_server(args.host, out_dir, sim_options) as url:
        models = headless.check_server(url, api_key, args.model)
        if check is not None:
            checked(check, url, models, api_key, args, given)
        headless.write_settings(out_dir, url, models, ["llm-bench", *argv], api_key, settings)
        print(f"measuring {url}" + ("" if args.host else " (the built-in simulated engine)"), flush=True)
        print(mark_line(mark, given.repeat_mark is not None), flush=True)
        try:
            headless.run_locust(locustfile, url, out_dir, users, handed, api_key,
                                run_time_s=run_time_s, watch=plan, stall_s=stall.backstop_s(given.read_timeout, idle_s))
        except RunFailed as exc:
            failure = exc
    try:
        records, _info = load.load_run(out_dir)
    except load.RunDirError:
        if failure is not None:
            return Measured(out_dir, 0, False, failure)
        raise UsageError(f"the run wrote no records; see {out_dir / 'locust.log'}") from None
    print(overview.format_overview(overview.overview(records)))
    for warning in study.warnings(records) + rates.warnings(records):
        print(f"warning: {warning}")
    print(f"records: {out_dir / 'requests.csv'}")
    return Measured(out_dir, len(record_sets.failed(record_sets.measured(records))), True, failure)


def checked(check, url: str, models: dict, api_key: str, args, given) -> None:
    """``check`` given the server's token count (the engine profile's, as a run's users count)."""
    profile = engine.profile(args.engine) if args.engine != "auto" else engine.detect(url, models, api_key=api_key)
    count = tokens.token_counter(url, profile, args.model or server.first_model(models), api_key,
                                 timeout_s=given.read_timeout)
    try:
        check(count)
    except (ValueError, TrafficError, TokenizerError, server.ServerError) as exc:
        raise UsageError(str(exc)) from None


def mark_line(mark: str, repeated: bool) -> str:
    if repeated:
        return (f"run mark {mark}, repeated on purpose (--repeat-mark): the same texts as the run that used it, "
                "meant to be served from the server's cache")
    return (f"run mark {mark}: it opens every prompt, so that nothing is served from an earlier run's cache "
            f"(--repeat-mark {mark} sends the same texts again)")


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


def run_report(args, argv: list[str]) -> int:
    from analysis import load, report

    run_dir, said = gathering.run_directory([Path(p) for p in args.paths], Path(args.out) if args.out else None)
    for line in said:
        print(line)
    try:
        written = report.write_report(run_dir)
    except load.RunDirError as exc:
        raise UsageError(str(exc)) from None
    for line in written.said:
        print(line)
    for path in written:
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


if __name__ == "__main__":
    sys.exit(main())
