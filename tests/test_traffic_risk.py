"""``simulate --traffic``: seeded traffic, served to its first crash, and the odds over seeds.

Every seed's crash is exact: the requests that arrived by its crash step, written as a
workload, crash ``simulate --workload`` at the same engine step with the same error.
"""

import json
import os
import random
import re

import pytest

from hisparse_model import cli
from hisparse_model.model.knobs import Knobs
from hisparse_model.answers.simulate import simulate
from hisparse_model.answers.arrivals import refused_at_door
from hisparse_model.answers.traffic_risk import (Estimate, SeedRun, Traffic, TrafficError, estimate,
                                         first_crash, generate, load_traffic, workload_text)
from hisparse_model.schedule.workload import DistinctPrompt, Workload, load_workload
from hisparse_model.schedule.prefix_keys import block_keys, request_keys

SWAP = ("ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
        "stop={}, capacity={}.")
SERVE = dict(max_num_seqs=64, max_model_len=163840, max_num_batched_tokens=8192,
             host_pool_gib=512)  # C = 64
SHAREGPT_SHAPED = {"rate_per_s": 10, "prompt_len": [
    {"min": 1, "max": 256, "weight": 3}, {"min": 257, "max": 2048, "weight": 5},
    {"min": 2049, "max": 16000, "weight": 2}], "max_tokens": 8}


def _file(tmp_path, obj, name="traffic.json") -> str:
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return str(path)


# prompt_id, length: the tokens are (1000 + k // 1000, 2000 + k % 1000, 102, ..., 99 + n)
DISTINCT = [(0, 1, (1000,)), (5, 2, (1000, 2005)), (1234, 4, (1001, 2234, 102, 103)),
            (999_999, 3, (1999, 2999, 102))]


@pytest.mark.parametrize("k,n,head", DISTINCT)
def test_distinct_prompts_are_their_tokens(k, n, head):
    """A prompt_id names its tokens: equal to the tuple, the same block keys, a round trip."""
    d = DistinctPrompt(k, n)
    assert tuple(d) == head and d == head and hash(d) == hash(head)
    for m in (64, 200, 700):  # 1, 3 and 10 full blocks: keys from the blocks, not the tuple
        long = DistinctPrompt(k, m)
        w = Workload.from_json([{"prompt_len": m, "prompt_id": k}])
        assert request_keys(w) == [block_keys(tuple(long))]
        assert Workload.from_json(w.as_json()) == w
    # two ids share no block key; the same id at two lengths shares its common blocks (3)
    a, b, c = (request_keys(Workload.from_json([{"prompt_len": m, "prompt_id": i}]))[0]
               for i, m in ((1, 200), (2, 200), (1, 300)))
    assert not set(a) & set(b) and c[:3] == a


# file, what it reads: (rate, prompt_len described, max_tokens described)
FORMS = [
    (SHAREGPT_SHAPED, (10.0, "histogram 1-256, 257-2048, 2049-16000", "8")),
    ({"rate_per_s": 2.5, "prompt_len": 65, "max_tokens": [{"min": 1, "max": 4, "weight": 1}]},
     (2.5, "65", "histogram 1-4")),
    # JSON Lines: real requests' lengths (other keys ignored; output_len or max_tokens)
    ('{"prompt_len": 65, "output_len": 3, "id": "a"}\n\n{"prompt_len": 900}\n',
     (4.0, "2 requests' values (65 to 900), sampled with replacement",
      "2 requests' values (3 to 8), sampled with replacement")),
]


@pytest.mark.parametrize("obj,want", FORMS)
def test_traffic_forms(tmp_path, obj, want):
    """Both forms read as their rate and length distributions (--rate 4 for JSON Lines)."""
    t = load_traffic(_file(tmp_path, obj), 4.0 if isinstance(obj, str) else None)
    assert (t.rate_per_s, t.prompt_len.describe(), t.max_tokens.describe()) == want


# traffic file, options, what the one line names
BAD = [
    ('{"prompt_len": 5}\n{"prompt_len": 6}', [], "JSON Lines carry no arrival rate; give --rate"),
    ({"prompt_len": 5}, [], 'give "rate_per_s" or --rate R'),
    ({"rate_per_s": 1}, [], 'give "prompt_len"'),
    ({"rate_per_s": 1, "prompt_len": 5, "extra": 1}, [], "unknown key(s) 'extra'"),
    ({"rate_per_s": 0, "prompt_len": 5}, [], "rate_per_s: requests per second must be a number > 0"),
    ({"rate_per_s": 1, "prompt_len": [{"min": 9, "max": 3, "weight": 1}]}, [],
     "bin 1: max 3 is below min 9"),
    ({"rate_per_s": 1, "prompt_len": [{"min": 1, "max": 2, "weight": -1}]}, [], "bin 1 weight"),
    ({"rate_per_s": 1, "prompt_len": 0}, [], "prompt_len: must be an integer >= 1"),
    ('{"prompt_len": 5}\nnot json', ["--rate", 1], "line 2: not a JSON object"),
    ('{"output_len": 5}\n{"prompt_len": 6}', ["--rate", 1], "line 1: expected an object with"),
    ("", ["--rate", 1], "no requests"),
    (SHAREGPT_SHAPED, ["--minutes", 0], "argument --minutes: must be > 0 and <= 10,080"),
    (SHAREGPT_SHAPED, ["--seeds", 0], "argument --seeds: must be >= 1 and <= 1,000"),
    (SHAREGPT_SHAPED, ["--step-ms", -1], "argument --step-ms: must be >= 0.01 and <= 60,000"),
    (SHAREGPT_SHAPED, ["--jobs", 0], "argument --jobs: must be >= 1"),
    (SHAREGPT_SHAPED, ["-dp", 2], "data_parallel_size: --traffic serves one engine"),
    (SHAREGPT_SHAPED, ["--num-gpu-blocks-override", 500], "num_gpu_blocks_override"),
    # issue 43: a bin without "max" is no length 1, one without a weight no weight 1
    ({"rate_per_s": 1, "prompt_len": [{"min": 1, "weight": 1}]}, [], "bin 1: gives no 'max'"),
    ({"rate_per_s": 1, "prompt_len": [{"min": 1, "max": 9}]}, [], "bin 1: gives no 'weight'"),
    ({"rate_per_s": 1, "prompt_len": [{"weight": 1}]}, [], "gives no 'min' and no 'max'"),
    # values no server sees, each refused with its bound (an option's by its declared range,
    # cli_args.option_ranges, as argparse reads it)
    ({"rate_per_s": 1e12, "prompt_len": 5}, [], "rate_per_s: 1000000000000.0 requests per "
     "second is more than 10,000 (250 new requests in every engine step)"),
    (SHAREGPT_SHAPED, ["--rate", 1000000], "argument --rate: must be > 0 and <= 10,000 (250 new "
     "requests in every 25-ms engine step"),
    (SHAREGPT_SHAPED, ["--minutes", 1e9], "argument --minutes: must be > 0 and <= 10,080 (a "
     "week of traffic per seed), got 1,000,000,000"),
    (SHAREGPT_SHAPED, ["--seeds", 100000], "argument --seeds: must be >= 1 and <= 1,000"),
    # 10,000 requests/s for a week: 6,048,000,000 arrivals per seed, over 10,000,000
    ({"rate_per_s": 10_000, "prompt_len": 5}, ["--minutes", 10080], "6,048,000,000 requests "
     "per seed, more than 10,000,000"),
    # 1,000 requests/s for 166 minutes: 9,960,000 a seed (under 10,000,000), but 1,000 seeds
    # of them are 9,960,000,000 requests, over the 100,000,000 all seeds may serve (issue 61)
    ({"rate_per_s": 1000, "prompt_len": 5}, ["--minutes", 166, "--seeds", 1000], "--seeds 1000 "
     "x 9,960,000 requests per seed: 9,960,000,000 requests in all, more than 100,000,000"),
    ({"rate_per_s": 1, "prompt_len": 5, "max_tokens": 10**9}, [], "max_tokens: 1,000,000,000 "
     "tokens out is more than the model's context of 163,840"),
    ('{"prompt_len": 5, "output_len": 1000000000}\n', ["--rate", 1], "line 1 output_len: "
     "1,000,000,000 tokens out"),
    # every prompt refused by vLLM (not shorter than max_model_len 320): nothing to serve
    ({"rate_per_s": 1, "prompt_len": 320}, [], "every prompt is 320 tokens or longer, not "
     "shorter than max_model_len 320: vLLM refuses them all"),
    ({"rate_per_s": 1, "prompt_len": [{"min": 400, "max": 500, "weight": 1}]}, [],
     "every prompt is 400 tokens or longer"),
]


@pytest.mark.parametrize("obj,options,culprit", BAD)
def test_bad_traffic_is_one_line_and_2(tmp_path, capsys, obj, options, culprit):
    """A traffic file or option the estimate cannot use: exit 2, one line naming it."""
    path = _file(tmp_path, obj)
    try:  # an option out of its range is argparse's refusal: SystemExit(2)
        status = cli.main(["simulate", "--max-num-seqs", "64", "--traffic", path, "--minutes",
                           "1", "--seeds", "1", *map(str, options)])
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and culprit in err[0], err


# (--crash-workload, --plot) as given, "IN" standing for the --traffic file -> the one line
OUTPUT_ROWS = [
    ("IN", None, "--crash-workload IN: is the --traffic file; writing it would destroy it"),
    (None, "IN", "--plot IN: is the --traffic file"),
    ("DIR", None, "--crash-workload DIR: is a folder; give a file name"),
    (None, "DIR/missing/x.svg", "--plot DIR/missing/x.svg: no folder DIR/missing"),
    ("DIR/a.json", "DIR/a.json", "--plot DIR/a.json: is the --crash-workload file"),
    # a rename would put a regular file in place of each of these (as root, /dev/null itself)
    ("/dev/null", None, "--crash-workload /dev/null: is a character device"),
    (None, "DIR/fifo", "--plot DIR/fifo: is a FIFO"),
    (None, "DIR/link.svg", "--plot DIR/link.svg: is a symbolic link"),
    (None, "", "--plot '': give a file name"),
]


@pytest.mark.parametrize("workload,plot,line", OUTPUT_ROWS)
def test_an_output_that_would_destroy_an_input_is_refused(tmp_path, capsys, workload, plot,
                                                          line):
    """--crash-workload and --plot are checked before anything runs: never the --traffic
    input, each other or a folder, and the flag is named; the input is left as it was."""
    path = _file(tmp_path, SHAREGPT_SHAPED)
    before = open(path).read()
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "elsewhere.svg", tmp_path / "link.svg")

    def real(value):
        return value and value.replace("IN", path).replace("DIR", str(tmp_path))

    argv = ["simulate", "--max-num-seqs", "64", "--traffic", path, "--minutes", "1", "--seeds",
            "1"]
    argv += ["--crash-workload", real(workload)] if workload is not None else []
    argv += ["--plot", real(plot)] if plot is not None else []
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hisparse simulate: error: {real(line)}"] or (
        len(err) == 1 and err[0].startswith(f"hisparse simulate: error: {real(line)}")), err
    assert open(path).read() == before


def test_one_request_in_json_lines_and_refused_requests_are_said(tmp_path, capsys):
    """A JSON Lines file of one request (with a BOM, a blank line) is read as JSON Lines, not
    as a description; a file whose second request cannot be served (400 >= max_model_len
    320) says how many were refused, in words and in --json, with the knobs it answered for
    (B = min(64 * 320, 16384) = 16384)."""
    one = _file(tmp_path, '\ufeff{"prompt_len": 5, "output_len": 3}\n\n')
    t = load_traffic(one, 1.0)
    assert (t.prompt_len.samples, t.max_tokens.samples) == ((5,), (3,))
    half = str(tmp_path / "half.jsonl")
    with open(half, "w") as f:
        f.write('{"prompt_len": 5, "output_len": 3}\n{"prompt_len": 400, "output_len": 3}\n')
    argv = ["simulate", "--max-num-seqs", "64", "--traffic", half, "--rate", "2", "--minutes",
            "1", "--seeds", "1"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    said = re.search(r"Refused: (\d+) of (\d+) requests \((\d+) %\): prompt and max_tokens "
                     r"together past max_model_len 320, which vLLM's server answers HTTP 400",
                     text)
    assert said and 0 < int(said[1]) < int(said[2]), text[:800]
    assert cli.main(argv + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["knobs"] == {"vllm_version": "0.31.0", "max_num_seqs": 64,
                            "max_num_batched_tokens": 16384, "max_model_len": 320}
    assert out["refused"] == int(said[1]) and out["requests"] == int(said[2]) - int(said[1])


def test_missing_file_and_both_sources_are_refused(tmp_path, capsys):
    """No such file: one line naming it; --workload with --traffic: argparse's one line."""
    assert cli.main(["simulate", "--max-num-seqs", "2", "--traffic",
                     str(tmp_path / "none.json")]) == 2
    assert "none.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["simulate", "--traffic", "a", "--workload", "b"])
    assert exc.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_a_lone_prompt_crashes_at_the_first_arrival(tmp_path):
    """Every prompt is 3 tokens and S = 2 (C = 2): the first request, alone on an idle
    server, is a 3-token step with no decode, so each seed dies at its first arrival."""
    traffic = load_traffic(_file(tmp_path, {"rate_per_s": 0.5, "prompt_len": 3}))
    knobs = Knobs()  # the fix PR's engine: S = 2, B = 640, max_model_len 320
    est = estimate(knobs, traffic, 10, seeds=4, step_ms=25)
    for run in est.runs:
        # a Poisson process's first arrival: one exponential gap from the seed's generator
        # (a fixed length draws nothing); at 25 ms a step, step = floor(1000 t / 25)
        first = int(random.Random(run.seed).expovariate(0.5) / 0.025)
        assert (run.crash_step, run.kind, run.tokens) == (first, "lone_prompt", 3)
        assert run.error == SWAP.format(3, 2) and len(run.workload()) == 1
    assert est.share == 1.0 and est.by(10) == 1.0


# knobs, MTP drafts accepted per verify step, C: S = 64 and q = 1 + K, so C = 64 (1 + K)
REPLAYS = [(Knobs(**SERVE), None, 64),
           (Knobs(**SERVE, enable_prefix_caching=False), None, 64),
           (Knobs(**SERVE, num_speculative_tokens=2), 1, 192)]


@pytest.mark.parametrize("knobs,accepted,c", REPLAYS)
def test_each_seeds_crash_replays_through_simulate_workload(tmp_path, knobs, accepted, c):
    """Each crashed seed's requests up to its crash step, written and read back as a workload,
    crash the model's serving path at the same engine step with the same error."""
    traffic = load_traffic(_file(tmp_path, {**SHAREGPT_SHAPED, "prompt_len": [
        {"min": 1, "max": 2 * c, "weight": 1}]}))  # a (C + 1)-token prompt is 1 in 2C
    est = estimate(knobs, traffic, 5, seeds=4, accepted=accepted)
    crashed = [r for r in est.runs if r.crash_step is not None]
    assert len(crashed) >= 2, est.as_json()
    for run in crashed:
        path = str(tmp_path / f"seed{run.seed}.json")
        with open(path, "w") as f:
            f.write(workload_text(run))
        crash = simulate(knobs, load_workload(path), accepted).crash
        assert crash == {"step": run.crash_step, "error": run.error}
        assert run.error == SWAP.format(c + 1, c) and run.tokens == c + 1


def test_cli_traffic_writes_a_workload_simulate_replays(tmp_path, capsys):
    """``simulate --traffic ... --crash-workload F`` then ``simulate --workload F``: the same
    crash step and error, from the command line (--check: exit 1)."""
    path = _file(tmp_path, {"rate_per_s": 0.5, "prompt_len": 3})
    out = str(tmp_path / "crash.json")
    status = cli.main(["simulate", "--max-num-seqs", "2", "--traffic", path, "--minutes", "5",
                       "--seeds", "3",
                       "--json", "--check", "--crash-workload", out, "--jobs", "1"])
    got = json.loads(capsys.readouterr().out)
    assert status == 1 and got["crashed_share"] == 1.0
    first = min(got["seeds"], key=lambda s: s["crash_step"])
    assert cli.main(["simulate", "--max-num-seqs", "2", "--workload", out, "--json"]) == 0
    sched = json.loads(capsys.readouterr().out)
    assert sched["crash"] == {"step": first["crash_step"], "error": first["error"]}


# (--max-num-seqs, --vllm, the line said, written) for 0.5 requests/s of 3-token prompts
# over 5 minutes: S 2 crashes a seed serving (C = 2 < 3 tokens: the verdict's lone prompt);
# S 4 (C = 4 >= 3) serves them all; S 1 dies at start-up (a 2-token capture, C = 1)
NOT_WRITTEN = [
    ("4", "0.31.0", "--crash-workload OUT: not written: no seed crashed the server", False),
    ("1", "0.31.0", "--crash-workload OUT: not written: the server dies at start-up, before "
                    "any request", False),
    ("2", "0.31.0", "seed 0's requests up to its crash: OUT (simulate --workload replays "
                    "them to the same step)", True),
]


@pytest.mark.parametrize("seqs,version,line,written", NOT_WRITTEN)
def test_crash_workload_says_when_there_is_none_to_write(tmp_path, capsys, seqs, version, line,
                                                         written):
    """--crash-workload writes the earliest serving crash's requests, or writes nothing and
    says why, in words and in --json."""
    path = _file(tmp_path, {"rate_per_s": 0.5, "prompt_len": 3})
    out = str(tmp_path / "crash.json")
    argv = ["simulate", "--vllm", version, "--max-num-seqs", seqs, "--traffic", path,
            "--minutes", "5", "--seeds", "1", "--crash-workload", out, "--jobs", "1"]
    cli.main(argv)
    said = [text.strip() for text in capsys.readouterr().out.splitlines()]
    assert line.replace("OUT", out) in said, said
    assert os.path.exists(out) == written
    if written:
        os.remove(out)
    cli.main([*argv, "--json"])
    assert json.loads(capsys.readouterr().out)["crash_workload"] == {"path": out,
                                                                     "written": written}


def test_seeded_runs_are_the_same_in_parallel(tmp_path):
    """A seed's run depends on the seed alone: two jobs give what one job gives."""
    traffic = load_traffic(_file(tmp_path, SHAREGPT_SHAPED))
    one = estimate(Knobs(**SERVE), traffic, 2, seeds=3, jobs=1)
    two = estimate(Knobs(**SERVE), traffic, 2, seeds=3, jobs=2)
    assert one.as_json() == two.as_json()
    assert generate(traffic, 2, 7, 25, 163840) == generate(traffic, 2, 7, 25, 163840)


# knobs, why no seed is served: the verdict for all traffic is never
NEVER = [(Knobs(vllm_version="0.32.0", **SERVE), "routes on C"),
         (Knobs(attention_backend="FLASHMLA_SPARSE", **SERVE), "decode part")]


@pytest.mark.parametrize("knobs,why", NEVER)
def test_never_exposed_is_zero_and_says_why(tmp_path, knobs, why):
    """Where no traffic can crash the server the share is 0 with the reason, and serving a
    seed anyway finds no crash (the verdict is not taken on trust)."""
    traffic = load_traffic(_file(tmp_path, SHAREGPT_SHAPED))
    est = estimate(knobs, traffic, 3, seeds=2)
    assert est.share == 0 and why in est.never_because and est.median_minutes is None
    run = est.runs[0]
    assert first_crash(knobs, run.workload()) is None


def test_startup_crash_is_every_seed_at_minute_0(tmp_path, capsys):
    """S = 1 dies at start-up (a 2-token PIECEWISE capture, C = 1): every seed, at 0."""
    path = _file(tmp_path, SHAREGPT_SHAPED)
    assert cli.main(["simulate", "--max-num-seqs", "1", "--traffic", path, "--minutes", "1",
                     "--seeds", "2", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "Crashed within 1.0 min: 2 of 2 seeds (100 %)" in out and "at start-up" in out
    assert SWAP.format(2, 1) in out


def _run(seed, minute):  # a SeedRun crashed at ``minute`` (25 ms steps), or not
    step = None if minute is None else int(minute * 60000 / 25)
    return SeedRun(seed, (), 0, step, None if step is None else "e", "lone_prompt")


# crash minutes of the seeds (None: survived), median over all seeds, share by minute 5
ODDS = [
    ([1, 2, 3, None], 2.0, 0.75),  # 4 seeds: the (4 + 1) // 2 = 2nd sorted, survivors last
    ([1, None, None, 9], 9.0, 0.25),  # 2 of 4 crashed: sorted 1, 9, then survivors; 2nd: 9
    ([4, None, 6], 6.0, 1 / 3),  # 3 seeds: the 2nd of 3 is 6
    ([None, None], None, 0.0),
]


@pytest.mark.parametrize("minutes,median,by5", ODDS)
def test_odds_arithmetic(minutes, median, by5):
    """The median is the middle seed's crash time, survivors counted as later than any."""
    runs = [_run(i, m) for i, m in enumerate(minutes)]
    est = Estimate(Knobs(), Traffic(1.0, None, None, "t"), 10, 25.0, runs)
    assert est.median_minutes == median
    assert est.by(5) == pytest.approx(by5)
    curve = est.curve(10)
    assert [c["minute"] for c in curve] == list(range(1, 11))
    assert all(a["share"] <= b["share"] for a, b in zip(curve, curve[1:]))
    assert curve[-1]["share"] == pytest.approx(est.share)


def test_too_many_requests_for_prompt_ids(tmp_path):
    """More requests than prompt_ids (a million) in one seed: one line naming --minutes
    (10,000 requests/s, the highest rate taken, for 101 s: 1,010,000 arrivals)."""
    traffic = load_traffic(_file(tmp_path, {"rate_per_s": 10_000, "prompt_len": 5}))
    with pytest.raises(TrafficError, match="--minutes"):
        generate(traffic, 101 / 60, 0, 25, 320)


README_PLOT = ["simulate", "--max-num-seqs", "1024", "--max-num-batched-tokens", "8192",
               "--max-model-len", "163840", "--host-pool-gib", "512", "--traffic",
               "hisparse_model/data/traffic-example.json", "--minutes", "30"]


def test_readme_plot_is_redrawn_the_same(tmp_path, capsys, monkeypatch):
    """docs/simulate.md's picture is what its command draws now (the model moved: redraw it)."""
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = tmp_path / "plot.svg"
    monkeypatch.chdir(root)
    assert cli.main([*README_PLOT, "--plot", str(out)]) == 0
    assert "8 seeds" in capsys.readouterr().out
    with open(os.path.join(root, "docs", "traffic-risk.svg")) as f:
        assert out.read_text() == f.read()
    readme = open(os.path.join(root, "docs", "simulate.md")).read()
    assert " ".join(README_PLOT[1:]) in " ".join(readme.split())
    assert "![Share of 8 seeds crashed by each minute" in readme


def test_chart_draws_each_kind_and_says_when_none_crashed(tmp_path):
    """The chart has one band per crash kind with its legend entry, and a never says why."""
    from hisparse_model.views.risk_chart import risk_chart, risk_html

    runs = [_run(0, 2), _run(1, 6), _run(2, None), _run(3, 1)]
    runs[1].kind, runs[3].kind = "burst", "last_chunk"
    traffic = load_traffic(_file(tmp_path, SHAREGPT_SHAPED))
    est = Estimate(Knobs(), traffic, 10, 25.0, runs)
    svg = risk_chart(est)
    for kind in ("lone_prompt", "burst", "last_chunk"):  # one band each, and its legend
        assert svg.count(f"hs-risk-{kind}") == 1 and f">{kind}: " in svg
    assert "data-crashed='3'" in svg and "data-share='0.7500'" in svg  # 3 of 4 seeds
    assert "3 of 4 seeds crashed within 10 minutes" in risk_html(est)
    never = Estimate(Knobs(vllm_version="0.32.0"), traffic, 10, 25.0, [_run(0, None)],
                     never_because="vLLM 0.32.0 routes on C")
    assert "no seed crashed: vLLM 0.32.0 routes on C" in risk_chart(never)


@pytest.mark.parametrize("prompt_len, max_tokens, max_model_len, refused", [
    (7935, 375, 8192, True),   # 7,935 + 375 = 8,310 > 8,192: the served replay's HTTP 400
    (7817, 375, 8192, False),  # 7,817 + 375 = 8,192: exactly the context, served
    (7818, 375, 8192, True),   # one token more: 8,193
    (8192, 0, 8192, True),     # a prompt as long as the context is refused whatever it asks
    (319, 1, 320, False),      # 319 + 1 = 320
    (319, 2, 320, True),       # 321
])
def test_the_servers_door(prompt_len, max_tokens, max_model_len, refused):
    """vLLM's OpenAI server refuses a request whose prompt and max_tokens together pass
    max_model_len (its prompt may hold max_model_len - max_tokens tokens), and every prompt
    not shorter than max_model_len."""
    assert refused_at_door(prompt_len, max_tokens, max_model_len) is refused


def test_a_log_read_for_the_step_time_is_never_the_plot(tmp_path, capsys):
    """``--step-ms-from-log v.log --plot v.log`` is refused before anything runs (the log
    would have been replaced by the SVG, exit 0); the log is left as it was."""
    log = tmp_path / "v.log"
    log.write_text("INFO 12-06 09:00:00 [loggers.py:191] Engine 000: Avg prompt throughput\n")
    traffic = _file(tmp_path, SHAREGPT_SHAPED)
    argv = ["simulate", "--max-num-seqs", "64", "--traffic", traffic, "--minutes", "1",
            "--seeds", "1", "--step-ms-from-log", str(log), "--plot", str(log)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hisparse simulate: error: --plot {log}: is the --step-ms-from-log file; "
                   "writing it would destroy it (give another file name)"]
    assert log.read_text().startswith("INFO 12-06")


@pytest.mark.parametrize("option", [["--plot", "x.svg"], ["--crash-workload", "x.json"],
                                    ["--rate", "2"], ["--speed", "2"], ["--from", "0"],
                                    ["--to", "9"], ["--minutes", "60"], ["--seeds", "8"],
                                    ["--seed", "0"], ["--jobs", "1"], ["--step-ms", "5"],
                                    ["--step-ms-from-metrics", "http://localhost:8000"],
                                    ["--step-ms-from-log", "serve.log"],
                                    ["--step-cost-from-log", "serve.log"],
                                    ["--step-cost-from-calibration", "steps"]])
def test_traffic_options_with_a_workload_are_refused_not_ignored(tmp_path, capsys, option):
    """A --workload is served as it is: an option only a traffic estimate reads is one line
    naming it (exit 2), never silently ignored, its default value given included."""
    work = tmp_path / "w.json"
    work.write_text(json.dumps({"requests": [{"prompt_len": 3, "max_tokens": 2}]}))
    argv = ["simulate", "--max-num-seqs", "4", "--workload", str(work), *option]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hisparse simulate: error: {option[0]}: only with --traffic (a --workload "
                   "is served as it is)"]


def test_a_poisson_seeds_host_pool_refusal_names_the_seed():
    """Poisson traffic, served as it is made: a host pool that may run short is refused naming
    the seed's traffic (not "the trace's replay"): 10 requests/s of up to 100,000 tokens at
    S 16 can hold 4,754 blocks by engine step 110, more than a 2 GiB pool's 3,640 (a finished
    request's are freed: the bound is what the requests in flight hold, not what all held)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--max-num-seqs",
                          "16", "--max-model-len", "163840", "--traffic", "-", "--minutes", "10",
                          "--seeds", "1", "--host-pool-gib", "2"],
                         input=json.dumps({"rate_per_s": 10, "max_tokens": 8, "prompt_len": [
                             {"min": 1, "max": 100000, "weight": 1}]}),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and ("may run short serving seed 0's traffic: by engine step "
                                    "110 its requests can hold 4754 blocks") in out.stderr


# (--minutes, extra flags, the words naming what the suggested pool covers). The Azure
# excerpt x6: 200 requests over 199 / 6.03 = 33 s of trace time, so --minutes 0.5 (30 s)
# leaves rows unreplayed and --minutes 1 (60 s) replays them all; --from 0 reads it as a
# stream (StreamedTraffic), the rest held whole. A 0.3 GiB pool (546 blocks) runs short by
# engine step 563 in both (554 blocks held > 545).
AZURE = os.path.join(os.path.dirname(__file__), "traces", "azure-code-2023-excerpt.csv")
CUT_REPLAYS = [
    (0.5, [], "serving the trace's first 0.5 min replayed (--minutes; the rows after them, "
              "not replayed, may need more): by engine step 563"),
    (0.5, ["--from", "0"], "serving the trace's first 0.5 min replayed (--minutes; the rows "
                           "after them, not replayed, may need more): by engine step 563"),
    (1, [], "serving the trace's replay: by engine step 563"),
    (1, ["--from", "0"], "serving the trace's replay: by engine step 563"),
]


@pytest.mark.parametrize("minutes,extra,words", CUT_REPLAYS)
def test_a_replays_host_pool_refusal_says_when_minutes_cut_the_trace(minutes, extra, words):
    """The host pool a replay's refusal suggests is the peak of the rows replayed: where
    --minutes stopped the replay with rows left, the refusal says so (held whole or streamed)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--vllm", "0.31.0",
                          "--max-num-seqs", "128", "--max-model-len", "8192",
                          "--max-num-batched-tokens", "8192", "--traffic", str(AZURE),
                          "--host-pool-gib", "0.3", "--speed", "6", "--minutes", str(minutes),
                          "--step-ms", "10", *extra], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and words in out.stderr, out.stderr
