"""Each option declared once (bench_tasks.options): the command line, Locust's parser and the argv between agree."""

from __future__ import annotations

import contextlib
import io
import json
from types import SimpleNamespace

import pytest
from locust.argument_parser import get_parser

from bench_tasks import options
from llm_bench.cli import build_parser
from locustfiles import llm_run


def locust_parse(*argvs: list[str]) -> tuple[list[str], list]:
    """Locust's own flags, and what its parser (with ours, as llm_run adds them) makes of each argv: the
    namespace, or its error line."""
    parser = get_parser(default_config_files=[])
    theirs = sorted(parser._option_string_actions)
    llm_run.add_options(parser)
    answers = []
    for argv in argvs:
        error = io.StringIO()
        try:
            with contextlib.redirect_stderr(error):
                answers.append(parser.parse_args(argv))
        except SystemExit:
            answers.append(error.getvalue().strip().splitlines()[-1])
    return theirs, answers


def test_locust_defines_none_of_our_flags_and_each_is_declared_once():
    flags = [option.flag for option in options.OPTIONS]
    assert len(flags) == len(set(flags))
    theirs, _ = locust_parse()
    assert not {flag for flag, _ in options.locust_arguments()} & set(theirs)


@pytest.mark.parametrize("command, argv", [
    ("quick", ["--runs", "2", "--sizes", "1k,2000", "--only", "chat,burst", "--setup", "lab", "--api", "messages"]),
    ("capacity", ["--slo", "ttft_p95=0.5,errors=0.01", "--think-time", "1-2", "--start-students", "3", "--step", "+2",
                  "--max-step-s", "400", "--ignore-eos"]),
    ("run", ["--requests", "4", "--question", "a, b?", "--question", "c", "--stop", "END", "--max-tokens", "32"]),
    ("capacity", ["--slo", "ttft_p95=1", "--paste-share", "0.25", "--paste-size", "1500", "--thinking", "on"]),
    ("run", ["--rate", "2.5", "--arrivals", "gamma:2", "--duration", "30", "--seed", "7", "--max-in-flight", "16",
             "--slo", "ttft_p95=0.5"]),
    ("sweep", ["--rates", "4,1,2", "--window-s", "12", "--settle-s", "0", "--min-requests", "5", "--probe-s", "3"]),
    ("sweep", ["--slo", "e2e_p99=9", "--arrivals", "constant", "--max-tokens", "64", "--ignore-eos"]),
])
def test_the_argv_handed_to_locust_gives_locust_the_command_s_values(command, argv):
    cli = build_parser().parse_args([command, *(["chat"] if command == "run" else []), *argv, "--out", "x"])
    _, (locust,) = locust_parse(["--out", "x", *options.locust_argv(cli, command)])
    mine, theirs = options.values(cli, command), options.values(locust)
    shared = [o.name for o in options.OPTIONS if command in o.commands and o.locust]
    assert {name: getattr(mine, name) for name in shared} == {name: getattr(theirs, name) for name in shared}
    assert json.dumps(options.settings(cli, command))  # settings.json holds them as given


BAD = [("--sizes", "4k,lots"), ("--runs", "0"), ("--slo", "ttft=1"), ("--think-time", "40-10"),
       ("--start-students", "none"), ("--step", "x1"), ("--read-timeout", "nan"), ("--bursts", "4,-1"),
       ("--only", "chat,tea"), ("--thinking", "yes"), ("--paste-share", "1.5"), ("--paste-size", "4k,8k"),
       ("--rate", "0"), ("--arrivals", "gamma:0"), ("--arrivals", "bursty"), ("--rates", "2,2"), ("--seed", "-1"),
       ("--window-s", "0"), ("--api", "completions")]


def test_a_bad_value_is_refused_the_same_way_on_every_path(capsys):
    _, answers = locust_parse([], *([flag, text] for flag, text in BAD))
    form = answers[0]
    for (flag, text), theirs in zip(BAD, answers[1:]):
        name = flag[2:].replace("-", "_")
        command = next(c for c in options.MEASURING if c in options.BY_NAME[name].commands)
        required = ["--slo", "ttft_p95=1"] if command == "capacity" and flag != "--slo" else []
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, *(["chat"] if command == "run" else []), *required, flag, text,
                                       "--out", "x"])
        mine = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"argument {flag}: " in theirs and mine.endswith(theirs.split(": ", 1)[1]), (mine, theirs)
        # The web UI's start form writes text no parser has read: read when the run starts, it fails there.
        with pytest.raises(ValueError, match=f"^{flag}: "):
            options.values(SimpleNamespace(**{**vars(form), name: text}))


def test_more_stop_strings_than_openai_allows_are_refused_before_a_request_on_every_path(capsys):
    four, five = (["--stop", f"END{n}"] for n in range(4)), (["--stop", f"END{n}"] for n in range(5))
    four, five = [arg for pair in four for arg in pair], [arg for pair in five for arg in pair]
    _, (form, kept, refused) = locust_parse([], four, five)
    assert kept.stop == ["END0", "END1", "END2", "END3"]
    refused = refused.split(": ", 1)[1]  # after the program's name
    assert refused == "error: argument --stop: at most 4 (OpenAI's limit: vLLM refuses every request that sends more)"
    assert build_parser().parse_args(["run", "chat", *four, "--out", "x"]).stop == kept.stop
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["run", "chat", *five, "--out", "x"])
    assert exit_.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1].endswith(refused)
    with pytest.raises(ValueError, match=r"^--stop: at most 4 "):  # the web UI's form: read when the run starts
        options.values(SimpleNamespace(**{**vars(form), "stop": [f"END{n}" for n in range(5)]}))


def test_run_paste_hands_its_size_to_locust_as_paste_py_s_paste_size():
    cli = build_parser().parse_args(["run", "paste", "--size", "2k", "--requests", "3", "--users", "2", "--out", "x"])
    handed = options.locust_argv(cli, options.RUN)
    assert "--size" not in handed and handed[handed.index("--paste-size") + 1] == "2k"
    _, (locust,) = locust_parse(["--out", "x", *handed])
    mine, theirs = options.values(cli, options.RUN), options.values(locust)
    assert (mine.size, mine.requests) == (theirs.paste_size, theirs.requests) == (2048, 3)
    assert theirs.thinking is False and options.settings(cli, options.RUN)["size"] == "2k"


def test_an_empty_field_of_the_start_form_is_the_option_left_out():
    _, (form,) = locust_parse([])
    form.requests, form.settle_s = "", ""
    given = options.values(form)
    assert given.requests is None and given.settle_s is None and given.search().settle_s == 40.0


def test_typed_values_are_made_in_one_place():
    _, (parsed, too_large) = locust_parse(["--sizes", "300", "--only", "prompt,needle,chat"],
                                          ["--start-students", "9", "--max-students", "8"])
    given = options.values(parsed)
    suite = given.suite(("prompt", "needle"))
    assert suite.sizes == (300,) and suite.only == ("prompt", "needle") and suite.runs == 3
    assert given.slo.goals[0].limit == 1.0 and given.think_time.max_s == 40.0 and given.search().start is None
    with pytest.raises(ValueError, match="not within 1 to the largest"):
        options.values(too_large).search()


def test_the_open_loop_s_plan_is_one_rate_or_a_sweep_and_its_slo_may_be_none():
    def given(*argv: str):
        cli = build_parser().parse_args([*argv, "--out", "x"])
        return options.values(cli, cli.command)

    one = given("run", "rate", "--rate", "3", "--requests", "50", "--arrivals", "constant").open_loop()
    assert (one.rate_rps, one.requests, one.duration_s, one.arrivals.text) == (3.0, 50, None, "constant")
    auto = given("sweep")
    assert auto.slo is None and auto.open_loop().rates is None and auto.open_loop().settle_s == 10.0
    listed = given("sweep", "--rates", "2,1", "--slo", "ttft_p95=1", "--settle-s", "1").open_loop()
    assert listed.rates == (1.0, 2.0) and listed.settle_s == 1.0
    with pytest.raises(ValueError, match="--duration S or --requests N"):
        given("run", "rate", "--rate", "3", "--requests", "5", "--duration", "9").open_loop()
    with pytest.raises(ValueError, match="^--rate: "):
        given("run", "rate", "--duration", "9").open_loop()
    with pytest.raises(ValueError, match="capacity search judges each class by an SLO"):
        given("capacity", "--slo", "none").search()
    assert given("run", "chat").requests is None  # run chat and run paste fill in their own default
