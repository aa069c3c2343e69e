"""Every flag of every subcommand, fuzzed from the parser itself, and the scripts users run.

The flags are read off ``cli_args.build_parser()``: a flag added later is fuzzed without a new
test.  Each takes hostile values of its kind (numbers: nan, inf, 1e400, 5,000 digits, ...;
files: /dev/zero, a folder, a missing path, standard input; URLs: other schemes, control
characters, a closed port; names: the empty string, a NUL, a long string) and then whatever
Hypothesis draws, one flag at a time over a command that answers.

Invariant: the command answers (a documented status) or refuses in exactly one stderr line
with exit status 2, never a traceback, within seconds (an alarm fails a hang); a value refused
by the parser names its flag.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import pathlib
import signal
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hisparse_model import cli
from hisparse_model.cli_args import build_parser
from hisparse_model.model.knobs import knob_specs
from hisparse_flags import connector_flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
AZURE = str(ROOT / "tests" / "traces" / "azure-code-2023-excerpt.csv")
MODEL = "deepseek-ai/DeepSeek-V3.2"
DOCUMENTED = {0, 1, 2, 3, 4}
SECONDS = 60  # one run's alarm: a hang fails here, not the suite
# a value's kind from the flag: files read, files written, URLs, numbers, names
READ_FILES = {"workload", "traffic", "engine_args", "from_log", "file", "step_ms_from_log"}
WRITTEN = {"plot", "crash_workload", "out", "out_dir"}
NUMBER_KNOBS = {s.name for s in knob_specs() if s.kind in (int, float)}

NUMBERS = ["nan", "inf", "-inf", "1e400", "-1", "0", "-0", "1e-300", "9" * 5000, "0x10",
           "1_000", " 5 ", "5.5", "", "abc", "\x00", "1e3", str(2**64)]
NAMES = ["", " ", "\n", "\x00", "x" * 100_000, "ünï", "$(true)", "--help", "-"]


def make_files(tmp: pathlib.Path) -> None:
    """The hostile files :func:`_files` names, in ``tmp``."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "binary").write_bytes(bytes(range(256)) * 4)
    (tmp / "cut.gz").write_bytes(gzip.compress(b"x" * 5000)[:25])
    (tmp / "empty").write_bytes(b"")
    (tmp / "deep.json").write_text("[" * 100_000 + "]" * 100_000)


def _files(tmp: pathlib.Path) -> list[str]:
    return ["/dev/zero", "/dev/null", str(tmp), str(tmp / "missing" / "f"), "-", "",
            str(tmp / "binary"), str(tmp / "cut.gz"), str(tmp / "empty"), str(tmp / "deep.json")]


def _written(tmp: pathlib.Path) -> list[str]:
    return [str(tmp), str(tmp / "missing" / "x.json"), "", "/dev/null", str(tmp / "written")]


URLS = ["ftp://127.0.0.1/metrics", "http://127.0.0.1:1/metrics", "http://127.0.0.1:8000/m\n",
        "http:///metrics", "http://127.0.0.1:99999/", "file:///dev/zero", "", "x" * 10_000]


def flags() -> list[tuple[str, str, str]]:
    """(subcommand, flag, its dest) for every option that takes a value."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return [(name, a.option_strings[0], a.dest) for name, p in sub.choices.items()
            for a in p._actions if a.option_strings and a.nargs != 0
            and a.option_strings[0] not in ("-h", "--help")]


def hostile(dest: str, choices, tmp: pathlib.Path) -> list[str]:
    if dest in READ_FILES:
        return _files(tmp)
    if dest in WRITTEN:
        return _written(tmp)
    if dest == "step_ms_from_metrics":
        return URLS
    if choices:
        return ["", "bogus", str(list(choices)[-1]).lower() + "x", str(list(choices)[0]) + "\n"]
    return NUMBERS + NAMES[:4]


def argv_for(cmd: str, flag: str, dest: str, value: str) -> list[str]:
    """A command that answers, with ``flag value`` in it (the one value fuzzed)."""
    if cmd == "predict":
        base = ["predict", "--max-num-seqs", "4"]
    elif cmd == "simulate":
        given = [] if dest in ("workload", "traffic") else ["--traffic", AZURE]
        base = ["simulate", "--max-num-seqs", "64", "--host-pool-gib", "8", "--minutes", "0.2",
                "--seeds", "1", "--jobs", "1", *given]
    elif cmd == "check":
        rest = [] if dest in ("engine_args", "from_log") else [
            "--", "vllm", "serve", MODEL, "--max-num-seqs", "4", *connector_flags()]
        return ["check", flag, value, *rest]
    elif cmd == "explain":
        base = ["explain"]
    elif cmd == "live":
        base = ["live", "--max-num-seqs", "2"]
    else:
        base = [cmd]
    if dest == "max_num_seqs":
        base = [b for i, b in enumerate(base) if "--max-num-seqs" not in base[max(i - 1, 0):i + 1]]
    return [*base, flag, value]


def _alarm(signum, frame):
    raise TimeoutError(f"no answer within {SECONDS} s")


def run(argv: list[str]) -> tuple[int, str, str]:
    """``hisparse ARGV`` in-process, standard input empty; ``app`` is only parsed (it would
    serve)."""
    out, err = io.StringIO(), io.StringIO()
    old_stdin, old = sys.stdin, signal.signal(signal.SIGALRM, _alarm)
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""))
    signal.alarm(SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                if argv[0] == "app":
                    build_parser().parse_args(argv)
                    status = 0
                else:
                    status = cli.main(argv)
            except SystemExit as exc:
                status = exc.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        sys.stdin = old_stdin
    return status, out.getvalue(), err.getvalue()


def one_answer_or_one_refusal(argv: list[str], flag: str, status, err: str) -> None:
    assert status in DOCUMENTED, (argv[:6], status, err[-500:])
    assert "Traceback" not in err, (argv[:6], err[-2000:])
    if status == 2:
        assert err.count("\n") == 1 and err.endswith("\n"), (argv[:6], err[:1000])
        if ": error: argument " in err:  # the parser's refusal names the flag
            assert f"argument {flag}" in err or "argument " in err, err


FLAGS = flags()


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("fuzz")
    make_files(out)
    return out


def _cases():
    import tempfile

    tmp = pathlib.Path(tempfile.gettempdir()) / "hisparse-fuzz-flags"  # names only: ids
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for cmd, flag, dest in FLAGS:
        action = next(a for a in sub.choices[cmd]._actions if a.dest == dest)
        for i, _ in enumerate(hostile(dest, action.choices, tmp)):
            yield cmd, flag, dest, i


CASES = list(_cases())


def test_every_flag_is_fuzzed():
    """The parser's flags are the ones fuzzed: every subcommand, every option with a value
    (45 today; a new one is fuzzed the day it is added)."""
    assert {c for c, _, _ in FLAGS} == {"predict", "simulate", "explain", "check", "live", "app"}
    assert len(FLAGS) >= 45
    assert {("simulate", "--speed"), ("simulate", "--step-ms-from-metrics"),
            ("predict", "--host-pool-gib"), ("app", "--port")} <= {(c, f) for c, f, _ in FLAGS}


@pytest.mark.parametrize("cmd,flag,dest,i", CASES,
                         ids=[f"{c}{f}-{i}" for c, f, _, i in CASES])
def test_every_flag_takes_hostile_values_in_one_line(tmp, cmd, flag, dest, i):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    action = next(a for a in sub.choices[cmd]._actions if a.dest == dest)
    value = hostile(dest, action.choices, tmp)[i]
    argv = argv_for(cmd, flag, dest, value)
    status, out, err = run(argv)
    one_answer_or_one_refusal(argv, flag, status, err)
    assert not os.path.exists(AZURE + ".copy")  # nothing written where it was not asked


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(FLAGS), value=st.one_of(
    st.text(max_size=30), st.from_regex(r"-?\d{1,30}(\.\d{0,5})?(e-?\d{1,4})?", fullmatch=True)))
def test_any_value_of_any_flag_is_answered_or_refused_in_one_line(case, value):
    cmd, flag, dest = case
    if dest in READ_FILES | WRITTEN and value not in ("-", ""):
        value = f"/nonexistent/{value.replace('/', '_')}"  # no file of this machine is touched
    argv = argv_for(cmd, flag, dest, value)
    status, out, err = run(argv)
    one_answer_or_one_refusal(argv, flag, status, err)


# -- the scripts users run ------------------------------------------------------------------

sys.path.insert(0, str(ROOT / "scripts"))


def _run_json(speed=6):
    return {"trace": "azure-code-2023-excerpt.csv", "speed": speed, "replay_seconds": 40,
            "provenance": {"knobs": {"max_num_seqs": 143, "max_model_len": 8192}}}


# (what the folder holds: file -> text, the refusal's words)
FOLDERS = [
    ({}, "no run.json"),
    ({"run.json": "[1, 2]"}, "run.json is not a JSON object"),
    ({"run.json": '{"trace": "x", "speed'}, "malformed JSON"),
    ({"run.json": json.dumps({"random": 1})}, "no provenance.knobs object"),
    ({"run.json": json.dumps(_run_json(speed="fast"))}, "run.json speed must be a number"),
    ({"run.json": json.dumps(_run_json(speed=-1))}, "run.json speed must be > 0"),
    ({"run.json": json.dumps(_run_json(speed=float("nan")))}, "must be a finite number"),
    # an integer past a float (10^400): was an OverflowError from math.isfinite
    ({"run.json": json.dumps(_run_json(speed=10**400))}, "run.json speed must be > 0 and <="),
    ({"run.json": json.dumps({**_run_json(), "trace": "/etc/passwd"})},
     "the name of a trace file in"),
    ({"run.json": json.dumps({**_run_json(), "trace": "../traces/x.csv"})},
     "the name of a trace file in"),
    ({"run.json": json.dumps({**_run_json(), "trace": "nope.csv"})}, "no such file in"),
    ({"run.json": json.dumps({**_run_json(), "provenance": {"knobs": {"max_num_seqs": -4}}})},
     "max_num_seqs must be >= 1"),
    ({"run.json": json.dumps({**_run_json(), "warm_pass_seconds": "x"})},
     "warm_pass_seconds: a list of seconds"),
    ({"run.json": json.dumps(_run_json()), "metrics-0.txt": "<html>", "metrics-5.txt": "<b>"},
     "not a Prometheus sample line"),
    ({"run.json": json.dumps(_run_json()), "metrics-0.txt": "x 1\n"}, "no step time"),
]


@pytest.mark.parametrize("files,words", FOLDERS, ids=[w for _, w in FOLDERS])
def test_serve_compare_answers_a_bad_folder_in_one_line(tmp_path, capsys, files, words):
    import serve_compare

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert serve_compare.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("serve_compare.py: error: ") and words in err, err


# (arguments, the refusal's words): argparse's usage line is not printed (one line in all)
USAGE = [([], "the following arguments are required: runs"),
         (["x", "--bogus"], "unrecognized arguments: --bogus")]


@pytest.mark.parametrize("argv,words", USAGE)
def test_serve_compare_usage_errors_are_one_line(capsys, argv, words):
    """A usage error of serve_compare.py is one line and exit 2."""
    import serve_compare

    with pytest.raises(SystemExit) as exc:
        serve_compare.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err == f"serve_compare.py: error: {words}\n", err


def test_serve_compare_on_a_file_or_a_missing_folder(tmp_path, capsys):
    import serve_compare

    (tmp_path / "f").write_text("x")
    for folder in (tmp_path / "f", tmp_path / "missing"):
        assert serve_compare.main([str(folder)]) == 2
        assert "not a folder" in capsys.readouterr().err


# (the arguments, the refusal's words): each refused before anything is installed or built
RELEASE = [
    (["0.34.0\n"], "'0.34.0\\n' is not a release"),
    (["0.35"], "'0.35' is not a release"),
    (["\uff10.35.0"], "'\uff10.35.0' is not a release"),  # a full-width 0: re's \\d took it
    (["0.35.\u0660"], "is not a release"),  # an Arabic-Indic 0
    (["0.35.0", "--from", "0.30.0"], "--from 0.30.0: the model covers"),
    (["0.35.0", "--recordings", "/nonexistent"], "--recordings /nonexistent: not a folder"),
    (["0.35.0", "--recordings", "EMPTY"], "no recording (*.json) in it"),
    (["0.35.0", "--crosscheck-junit", "/nonexistent.xml"], "no such file"),
    (["0.35.0", "--crosscheck-junit", "BAD"], "not XML"),
    (["0.35.0", "--crosscheck-junit", "NOSUITE"], "no <testsuite>"),
    (["0.35.0", "--crosscheck-junit", "/dev/zero"], "more than 64 MiB, the bound on a recording"),
    (["0.35.0", "--out", "EMPTY"], "give a file name"),
]


@pytest.mark.parametrize("args,words", RELEASE, ids=[w for _, w in RELEASE])
def test_vllm_release_check_refuses_bad_arguments_before_installing(
        tmp_path, capsys, monkeypatch, args, words):
    import vllm_release_check

    def no_install(*a, **k):
        raise AssertionError("installed before the arguments were checked")

    monkeypatch.setattr(vllm_release_check.subprocess, "run", no_install)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.xml").write_text("<testsuite")
    (tmp_path / "nosuite.xml").write_text("<root/>")
    names = {"EMPTY": tmp_path / "empty", "BAD": tmp_path / "bad.xml",
             "NOSUITE": tmp_path / "nosuite.xml"}
    argv = [str(names.get(a, a)) for a in args]
    assert vllm_release_check.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
