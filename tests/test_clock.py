"""The engine's clock: a batch's cost, the times it puts on a replay, and the cost fitted to
what a server measured (schedule/clock.py, answers/clock_fit.py, answers/finish_times.py,
inputs/iteration_log.py busy_seconds, simulate --step-cost-from-log).

Invariant: a request finishes at the end of the batch whose output finishes it, batches run
back to back from the first arrival, each scheduled (async) as the batch before it starts, an
idle engine waits for the next arrival; a fit to busy
seconds built from a known cost gives that cost back; the clock fitted to one served replay's
log puts the other replays' requests and crash where the servers did, within the bounds
stated below.
"""

import json
import pathlib
import statistics
import subprocess
import sys
import tarfile

import pytest

from hisparse_model.answers.clock_fit import ClockFitError, fit, fit_batches, from_calibration
from hisparse_model.answers.finish_times import serve_on_clock
from hisparse_model.inputs.iteration_log import Second, busy_seconds
from hisparse_model.inputs.traffic_file import load_traffic
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.plan import plan
from hisparse_model.schedule.clock import StepCost, fixed

HERE = pathlib.Path(__file__).parent
SERVE = HERE / "recorded" / "serve"
# the served timed runs' server at S 143 (x6t143): CUDA graphs of up to 272 tokens; a sweep's
# rows and a refused file do not read it
PLAN = plan(Knobs(max_num_seqs=143, max_model_len=8192, host_pool_gib=6))
CALIBRATION = HERE / "recorded" / "calibration" / "h100-v034-2026-12-06.json"


def _trace(tmp_path, rows):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_traffic(str(path))


# (requests as (arrival_s, prompt_len, max_tokens), step ms) -> (batches, finish per request)
# A replay starts at its first arrival (0 s). Request 0: a 100-token prefill gives its first
# token, two decodes the next two: 3 batches x 10 ms = 0.03 s. Request 1 arrives at 1 s on an
# idle engine: the clock waits for it, one 50-token prefill gives its only token: 1.01 s.
# Two requests at once: one batch prefills both (150 tokens), two decodes: 0.03 s each.
# Async scheduling (both versions' default here): a batch is scheduled as the one before it
# starts. Request 1 arrives at 0.005 s, inside batch A (0-0.01 s, request 0's prefill); batch
# B (request 0's decode) was scheduled at 0 s, as A started, so request 1 joins batch C
# (scheduled at 0.01 s, run 0.02-0.03 s): both finish at 0.03 s (scheduled as each batch
# starts, request 1 would have joined B and finished at 0.02 s).
FIXED = [
    ([(1.0, 100, 3), (2.0, 50, 1)], 10, 4, {0: 0.03, 1: 1.01}),
    ([(0.0, 100, 3), (0.0, 50, 3)], 10, 3, {0: 0.03, 1: 0.03}),
    ([(0.0, 100, 3), (0.005, 50, 1)], 10, 3, {0: 0.03, 1: 0.03}),
    ([(0.0, 100, 1)], 2.5, 1, {0: 0.0025}),
]


@pytest.mark.parametrize("version", ["0.31.0", "0.34.0"])
@pytest.mark.parametrize("requests, step_ms, batches, finish", FIXED)
def test_a_fixed_clock_counts_batches(tmp_path, version, requests, step_ms, batches, finish):
    """On a fixed clock a request's finish is the number of batches run by then x step_ms
    (after an idle wait, from its arrival)."""
    traffic = _trace(tmp_path, [{"arrival_s": a, "prompt_len": n, "max_tokens": m}
                                for a, n, m in requests])
    got = serve_on_clock(Knobs(vllm_version=version, max_num_seqs=4), traffic, 1,
                         fixed(step_ms))
    assert got.batches == batches and got.crash_s is None
    assert {i: round(f, 9) for i, f in got.finish_s.items()} == finish
    assert got.mean_step_ms == pytest.approx(step_ms)


def test_a_batch_costs_what_it_computes():
    """base + prefill tokens x p + decode tokens x d + context tokens x c: a step with a
    100-token prompt chunk (50 computed before) and two decodes (context 10 and 20 before):
    2 + 100 x 0.01 + 2 x 0.5 + (150 + 11 + 21) x 0.001 = 2 + 1 + 1 + 0.182 = 4.182 ms."""
    from hisparse_model.schedule.step import Step

    st = Step(0, {0: 100, 1: 1, 2: 1}, {0: "prefill", 1: "decode", 2: "decode"},
              {0: 50, 1: 10, 2: 20})
    assert StepCost(2, 0.01, 0.5, 0.001).ms(st) == pytest.approx(4.182)
    assert fixed(7).ms(st) == 7


# busy seconds from a known cost: base 4 ms, 10 us per prefill token, 300 us per decode token
# (steps, prefill, decode):  4 x 100 + 0.01 x 30,000 + 0.3 x 1,000 = 400 + 300 + 300 = 1000
#                            4 x 50  + 0.01 x 65,000 + 0.3 x 500   = 200 + 650 + 150 = 1000
#                            4 x 10  + 0.01 x 93,000 + 0.3 x 100   = 40 + 930 + 30   = 1000
#                            4 x 200 + 0.01 x 14,000 + 0.3 x 200   = 800 + 140 + 60  = 1000
KNOWN = [(100, 30000, 1000), (50, 65000, 500), (10, 93000, 100), (200, 14000, 200)]
# decode only: 4 x 100 + 0.3 x 2,000 = 1000; 4 x 175 + 0.3 x 1,000 = 1000; 4 x 250 = 1000
DECODE_ONLY = [(100, 0, 2000), (175, 0, 1000), (250, 0, 0)]
FITS = [
    (KNOWN, (4.0, 0.01, 0.3)),
    (DECODE_ONLY, (4.0, 0.0, 0.3)),  # no prefill in any second: that term left out
]


@pytest.mark.parametrize("rows, cost", FITS)
def test_a_fit_gives_the_cost_back(rows, cost):
    """Seconds built from a cost fit to that cost (the terms no second exercises: 0)."""
    got = fit([Second("00:00:00", *r) for r in rows], "table")
    assert (got.base_ms, got.prefill_ms, got.decode_ms) == pytest.approx(cost, abs=1e-9)
    assert got.source == f"fitted to {len(rows)} busy seconds of table"


# batches from a known cost: 3 ms + 5 us a prompt token + 40 us a decode token + 0.1 us a
# context token: (prefill, decode, context) -> ms
#   (8192, 0, 8192)      3 + 40.96 + 0    + 0.8192 = 44.7792
#   (0, 64, 7000)        3 + 0     + 2.56 + 0.7    = 6.26
#   (0, 128, 100000)     3 + 0     + 5.12 + 10.0   = 18.12
#   (1000, 32, 50000)    3 + 5.0   + 1.28 + 5.0    = 14.28
#   (0, 1, 10)           3 + 0     + 0.04 + 0.001  = 3.041
BATCHES = [(8192, 0, 8192, 44.7792), (0, 64, 7000, 6.26), (0, 128, 100000, 18.12),
           (1000, 32, 50000, 14.28), (0, 1, 10, 3.041)]


def test_a_fit_to_measured_batches_gives_the_cost_back():
    """Batches built from a cost of four terms fit to that cost."""
    got = fit_batches([{"prefill": p, "decode": d, "context": c, "ms": ms}
                       for p, d, c, ms in BATCHES], "table")
    assert (got.base_ms, got.prefill_ms, got.decode_ms, got.context_ms) == pytest.approx(
        (3.0, 0.005, 0.04, 0.0001), rel=1e-9)


def test_too_few_seconds_are_refused_in_one_line():
    """Three unknowns need three busy seconds."""
    with pytest.raises(ClockFitError, match=r"^log\.txt: busy seconds of logged steps: 2, a "
                       r"fit needs 3 \(a log of vllm serve --enable-logging"):
        fit([Second("00:00:00", *r) for r in KNOWN[:2]], "log.txt")


def _line(stamp, ctx, gen):
    return (f"(APIServer pid=1) INFO 12-06 {stamp} [loggers.py:191] Engine 000: Iteration(0): "
            f"1 context requests, {ctx} context tokens, 1 generation requests, {gen} generation "
            "tokens, iteration elapsed time: 0.05 ms, GPU KV cache usage: 0.4%")


# stamps of the logged steps -> the busy seconds (both neighbours logged steps)
STAMPS = [
    (["10:00:00", "10:00:01", "10:00:01", "10:00:02", "10:00:05"], [("10:00:01", 2)]),
    (["23:59:59", "00:00:00", "00:00:01"], [("00:00:00", 1)]),  # over midnight
    (["10:00:00", "10:00:02", "10:00:04"], []),  # every second alone
]


@pytest.mark.parametrize("stamps, busy", STAMPS)
def test_busy_seconds_are_those_inside_a_busy_stretch(stamps, busy):
    """A second counts when the seconds before and after it logged steps too; each step's
    tokens add up (here 7 prefill and 3 decode tokens a step)."""
    got = busy_seconds("\n".join(_line(s, 7, 3) for s in stamps))
    assert [(s.at, s.steps) for s in got] == busy
    assert all((s.prefill_tokens, s.decode_tokens) == (7 * s.steps, 3 * s.steps) for s in got)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    for folder in ("h100-warm-2026-12-06", "h100-warm-v034-2026-12-06"):
        for packed in sorted((SERVE / folder).glob("*.tgz")):
            with tarfile.open(packed) as tar:
                tar.extractall(out, filter="data")
    return out


def _served(runs, name, cost):
    run = json.loads((runs / name / "run.json").read_text())
    knobs = Knobs.from_dict(run["provenance"]["knobs"])
    traffic = load_traffic(str(HERE / "traces" / run["trace"]), speed=float(run["speed"]))
    return serve_on_clock(knobs, traffic, float(run["replay_seconds"]) / 60, cost)


def _median_error(runs, name, served):
    """Median |model - server| / server of each answered request's latency (arrival to
    done), over the requests both finished."""
    rows = [json.loads(line) for line in (runs / name / "client.jsonl").open()]
    errs = [abs(served.latency_s(r["i"]) - (r["done_s"] - r["due_s"])) / (r["done_s"] - r["due_s"])
            for r in rows if r["status"] == 200 and r["i"] in served.finish_s]
    return statistics.median(errs), len(errs)


def _clock(runs, name):
    log = (runs / name / "server.log").read_text(errors="replace")
    return fit(busy_seconds(log), name)


# run -> (requests compared, the median per-request error bound), on vLLM 0.31.0, with the
# clock fitted to x6s128's log (10 busy seconds; a fixed clock of the /metrics step time is
# 3-7 times too fast on these requests: a burst of long prompts costs ~10 us a prompt token)
LATENCY = {
    "x6s128": (200, 0.10),   # the fit's own replay
    "mc1620b": (34, 0.10),   # another trace (Mooncake x0.2), another server
}


@pytest.mark.parametrize("name", sorted(LATENCY))
def test_the_fitted_clock_puts_each_request_where_the_server_did(runs, name):
    """With the clock fitted to one served replay, the median per-request latency error on
    the replays named is under 10 % (the issue's goal)."""
    err, n = _median_error(runs, name, _served(runs, name, _clock(runs, "x6s128")))
    assert n == LATENCY[name][0] and err < LATENCY[name][1]


def test_the_burst_of_long_prompts_is_where_the_clock_is_off(runs):
    """Requests 0-71 of the Azure x6 replay (a burst of 63 prompts of up to 7,435 tokens in
    6.5 s, then 9 more at 30.5 s) were served alike by both 0.31.0 servers (x6warm2's latencies
    0.56-1.51 of x6s128's), and the clock fitted to x6s128 puts them 20-40 % early on both:
    the median stays under 10 % on x6s128 only through its 128 later requests. A known gap,
    measured, not a bound to meet (the issue's goal is 10 % on every warm replay)."""
    def latencies(name):
        rows = {r["i"]: r for r in map(json.loads, (runs / name / "client.jsonl").open())}
        return [rows[i]["done_s"] - rows[i]["due_s"] for i in range(72)]
    ratios = [a / b for a, b in zip(latencies("x6warm2"), latencies("x6s128"))]
    assert 0.5 < min(ratios) and max(ratios) < 1.6
    clock = _clock(runs, "x6s128")
    for name in ("x6warm2", "x6s128"):
        served = _served(runs, name, clock)
        errs = [abs(served.latency_s(i) - lat) / lat
                for i, lat in enumerate(latencies(name)) if i in served.finish_s]
        assert len(errs) == 72 and 0.2 < statistics.median(errs) < 0.4


# crashed run -> the server's HiSparse error time; on the clock fitted to x6s128's log
CRASH = {"x6warm2": 31.262, "mc1620b": 120.066}


@pytest.mark.parametrize("name", sorted(CRASH))
def test_the_crash_on_the_fitted_clock_is_within_one_percent(runs, name):
    """The crash step starts on the clock within 1 % of the server's error."""
    served = _served(runs, name, _clock(runs, "x6s128"))
    assert abs(served.crash_s - CRASH[name]) <= 0.01 * CRASH[name]


def _simulate(*args):
    return subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", *args],
                          capture_output=True, text=True)


def test_simulate_lists_each_requests_finish_on_the_fitted_clock(runs):
    """simulate --step-cost-from-log: the JSON's on_the_clock holds the fitted cost, the crash
    on the clock and every accepted request's arrival and finish; the text says it once."""
    args = ["--max-num-seqs", "143", "--max-model-len", "8192", "--host-pool-gib", "6", "--traffic",
            str(HERE / "traces" / "azure-code-2023-excerpt.csv"), "--speed", "6",
            "--minutes", "2", "--step-cost-from-log", str(runs / "x6s128" / "server.log")]
    got = _simulate(*args, "--json")
    assert got.returncode == 0, got.stderr
    clock = json.loads(got.stdout)["on_the_clock"]
    assert clock["crash_scheduled"] == {"72": 144} and len(clock["requests"]) == 200
    assert clock["batches"] > 72 and "steps" not in clock  # batches, not engine step numbers
    assert sum(r["finish_s"] is not None for r in clock["requests"]) == 72
    assert clock["clock"]["source"].startswith("fitted to 10 busy seconds of")
    # a measured clock assumes the host as fast as when it was measured, in both outputs
    host = "the host as fast as when the batches were measured"
    assert clock["clock"]["measured"] is True and host in clock["assumed"]
    text = _simulate(*args).stdout
    assert text.count("On the engine's clock: step time ") == 1
    assert "72 of 200 requests finished, crash at 31.193 s on the clock" in text
    assert f"  assumed: {clock['assumed']}" in text


def test_a_fixed_clock_assumes_nothing_of_a_host():
    """A fixed --step-ms measured nothing: its replay assumes no host speed."""
    from hisparse_model.answers.finish_times import serve_on_clock
    from hisparse_model.inputs.traffic_file import load_traffic
    from hisparse_model.schedule.clock import fixed

    traffic = load_traffic(str(HERE / "traces" / "azure-code-2023-excerpt.csv"), speed=6.0)
    knobs = Knobs(max_num_seqs=143, max_model_len=8192, host_pool_gib=6)
    served = serve_on_clock(knobs, traffic, 0.2, fixed(5.0))
    assert served.as_json()["clock"]["measured"] is False
    assert "host" not in served.assumed() and "HTTP not counted" in served.assumed()


# what the calibration sweep measured in the engine (vLLM 0.34.0, H100): phase -> (batches
# of its second pass with a period, median ms, median prompt tokens, median decode tokens)
SWEEP = {
    "decode16:2": (96, 4.77, 0, 16),
    "decode64:2": (96, 12.58, 0, 64),
    "decode128:2": (96, 12.2, 0, 128),
    "prefill-long:2": (9, 36.33, 8191, 1),
}


def test_the_calibration_is_a_real_engine_run():
    """The committed sweep: vLLM 0.34.0 on an H100, async scheduling, DeepGEMM compiled on
    first use, every batch of every phase timed (860); the first passes hold the compilations
    (a batch of 20 s), the second passes none over 100 ms; the medians of four phases."""
    data = json.loads(CALIBRATION.read_text())
    prov = data["provenance"]
    assert (prov["vllm"], prov["async_scheduling"], prov["env"]["VLLM_DEEP_GEMM_WARMUP"]) == \
        ("0.34.0", True, "skip") and "H100" in prov["gpu"]
    rows = data["rows"]
    assert len(rows) == 860
    timed = [r for r in rows if r["ms"] is not None and not r["after_idle"]]
    assert max(r["ms"] for r in timed if r["phase"].endswith(":1")) > 10_000
    assert max(r["ms"] for r in timed if r["phase"].endswith(":2")) < 100
    for phase, (n, ms, prefill, decode) in SWEEP.items():
        got = [r for r in timed if r["phase"] == phase]
        assert (len(got), round(statistics.median(r["ms"] for r in got), 2),
                statistics.median(r["prefill"] for r in got),
                statistics.median(r["decode"] for r in got)) == (n, ms, prefill, decode)


# 0.34.0 run -> bounds of the median per-request error on the engine-calibrated clock
CALIBRATED = {"x6v034": (0.4, 0.6), "mc1620v034": (0.6, 0.85)}


@pytest.mark.parametrize("name", sorted(CALIBRATED))
def test_the_engine_calibrated_clock_is_not_yet_the_servers(runs, name):
    """A known gap, measured: fitted to the sweep's 430 second-pass batches, the linear cost
    (4.57 ms + 6.78 us a prompt token + 67.5 us a decode token + 0.07 us a context token)
    puts the served replays' requests of the same vLLM 40-85 % late: the sweep's engine ran in
    process, each batch's period holding the output processing the server does beside the
    engine (engine/calibrate.py), and a decode batch of 16 took 4.8 ms, of 64 12.6 ms, of 128
    12.2 ms (CUDA-graph sizes, not a line)."""
    cost = from_calibration(str(CALIBRATION), PLAN)
    assert cost.source.startswith("fitted to 430 batches measured in the engine")
    served = _served(runs, name, cost)
    err, _ = _median_error(runs, name, served)
    low, high = CALIBRATED[name]
    assert low < err < high
    rows = [json.loads(line) for line in (runs / name / "client.jsonl").open()]
    late = [served.latency_s(r["i"]) > r["done_s"] - r["due_s"] for r in rows]
    assert sum(late) > len(late) / 2  # late, not early: the periods hold more than the server's


# arguments -> the one line simulate answers, exit 2
REFUSALS = [
    (["--rate", "2"], "--step-cost-from-log: only with a trace replayed at its own times "
                      "(--traffic FILE without --rate)"),
    (["--step-ms", "3"], "--step-ms and --step-cost-from-log: give one step time"),
    (["--step-cost-from-calibration", str(CALIBRATION)],
     "--step-cost-from-log and --step-cost-from-calibration: give one step time"),
]


@pytest.mark.parametrize("extra, line", REFUSALS)
def test_step_cost_from_log_refusals(runs, extra, line):
    """A fitted clock needs a replayed trace and is the one step time given."""
    got = _simulate("--max-num-seqs", "143", "--traffic",
                    str(HERE / "traces" / "azure-code-2023-excerpt.csv"),
                    "--step-cost-from-log", str(runs / "x6s128" / "server.log"), *extra)
    assert got.returncode == 2 and got.stdout == ""
    assert got.stderr.strip().splitlines() == [f"hisparse simulate: error: {line}"]


def test_a_calibration_row_that_is_no_batch_is_refused_in_one_line(tmp_path):
    """A calibration file whose row is not a measured batch is named with its row."""
    bad = tmp_path / "cal.json"
    bad.write_text(json.dumps({"rows": [{"phase": "a:2", "prefill": -1, "decode": 0,
                                         "context": 0, "ms": 1}]}))
    got = _simulate("--max-num-seqs", "143", "--traffic",
                    str(HERE / "traces" / "azure-code-2023-excerpt.csv"),
                    "--step-cost-from-calibration", str(bad))
    assert got.returncode == 2 and got.stderr.strip().splitlines() == [
        f"hisparse simulate: error: --step-cost-from-calibration {bad}: row 0: not a measured "
        "batch (phase, prefill, decode, context, ms)"]


# Launching the next batch (schedule/clock.py): S 4 captures FULL graphs of up to 4 decode
# tokens and PIECEWISE ones of up to 8, so a 100-token prompt batch runs eagerly (NONE), a
# 6- or 7-token one PIECEWISE, a lone decode replays FULL (launched for nothing).  10 ms a batch
# of its own; request 0 (3 outputs) at 0 s, request 1 (1 output) at 0.045 s; async: a batch
# is scheduled as the one before it starts, an idle engine's batch pays its own launch.
# Each row by hand:
# * nothing launched: A 0-10 (r0's prompt), B 10-20, C 20-30 (its decodes): r0 at 0.030;
#   idle until r1 at 45 ms, D 45-55: r1 at 0.055.
# * eager 40: A after the idle engine starts at 40 (its own launch), ends 50; B, scheduled at
#   40 (r1 not there yet), decodes r0 (FULL), 50-60; C, scheduled at 50, holds r1's prompt
#   beside r0's last decode (101 tokens, eager): B lasts 40 ms more, to 100; C 100-110: both
#   at 0.110.
# * 0.1 ms a prompt token: A starts at 10 (100 x 0.1), 10-20, B 20-30, C 30-40: r0 at 0.040;
#   idle until 45, r1's prompt pays its own 10 ms: 55-65: 0.065.
# * 6-token prompts, PIECEWISE 20 (eager 40 unused): A starts at 20, 20-30, B 30-40, C 40-50:
#   r0 at 0.050 (r1 arrives at 45, after C was scheduled at 40); idle to 50, r1's prompt
#   (PIECEWISE) pays 20: 70-80: 0.080.
# * eager 40, request 0 with 2 outputs: A 40-50, B (its last decode) 50-60, C scheduled at 50
#   holds r1's prompt alone (eager): B, which finishes request 0, lasts to 100: r0 at 0.100,
#   r1 at 0.110 (the launch is the batch before's, not a later start of C's).
# The engine's busy time counts the launches: 4 batches x 10 = 40 ms; 3 x 10 + 2 x 40 = 110;
# 4 x 10 + 10 + 10 = 60; 4 x 10 + 20 + 20 = 80 (-> mean_step_ms, the estimate's step time).
# 3 x 10 + 40 + 40 = 110 for the last.
# (prompt tokens, request 0's outputs, launch eager / PIECEWISE ms, ms per prompt token)
LAUNCH = [
    (100, 3, (0, 0, 0), {0: 0.030, 1: 0.055}, (4, 0.040)),
    (100, 3, (40, 0, 0), {0: 0.110, 1: 0.110}, (3, 0.110)),
    (100, 3, (0, 0, 0.1), {0: 0.040, 1: 0.065}, (4, 0.060)),
    (6, 3, (40, 20, 0), {0: 0.050, 1: 0.080}, (4, 0.080)),
    (100, 2, (40, 0, 0), {0: 0.100, 1: 0.110}, (3, 0.110)),
]


@pytest.mark.parametrize("version", ["0.31.0", "0.34.0"])
@pytest.mark.parametrize("prompt, outputs, launch, finish, busy", LAUNCH)
def test_a_batch_pays_for_launching_the_next(tmp_path, version, prompt, outputs, launch, finish,
                                             busy):
    """A batch lasts its own cost plus launching the batch after it, by how that batch runs
    (eager, PIECEWISE, a FULL replay for nothing); after an idle engine a batch pays its own."""
    traffic = _trace(tmp_path, [{"arrival_s": a, "prompt_len": n, "max_tokens": m}
                                for a, n, m in [(0.0, prompt, outputs), (0.045, prompt, 1)]])
    eager, piecewise, per = launch
    got = serve_on_clock(Knobs(vllm_version=version, max_num_seqs=4), traffic, 1,
                         StepCost(10, launch_eager_ms=eager, launch_piecewise_ms=piecewise,
                                  launch_prefill_ms=per))
    assert {i: round(f, 9) for i, f in got.finish_s.items()} == finish
    assert (got.batches, round(got.engine_s, 9)) == busy


# Timed rows of S 4 batches (prefill, decode, context, requests) and how each runs there:
# FULL up to 4 decodes, PIECEWISE up to 8 tokens, else eager (NONE).
SERVED = [(0, 4, 4000, 4, "FULL"), (800, 3, 5000, 4, "NONE"), (0, 4, 5200, 4, "FULL"),
          (3000, 3, 9000, 4, "NONE"), (0, 4, 9100, 4, "FULL"), (0, 3, 7000, 3, "FULL"),
          (5, 3, 7600, 4, "PIECEWISE"), (0, 4, 7700, 4, "FULL"), (0, 4, 7800, 4, "FULL"),
          (2000, 0, 2000, 1, "NONE"), (0, 4, 9800, 4, "FULL"), (3, 2, 9900, 3, "PIECEWISE"),
          (0, 3, 9950, 3, "FULL"), (0, 2, 5000, 2, "FULL"), (1200, 2, 8000, 3, "NONE"),
          (0, 3, 8100, 3, "FULL")]


def _served_rows(cost):
    """Timed rows built from a known served cost: each period its own terms plus launching the
    batch after it by how that one runs (the last batch's period is not measured)."""
    rows = [{"phase": "served", "prefill": 100, "decode": 0, "context": 100, "requests": 1,
             "ms": None, "after_idle": True}]  # the first batch: no period
    for (p, d, c, n, _), nxt in zip(SERVED, SERVED[1:] + [None]):
        ms = None if nxt is None else cost.base_ms + cost.prefill_ms * p + cost.decode_ms * d \
            + cost.context_ms * c + cost.launch_ms(nxt[4], nxt[0])
        rows.append({"phase": "served", "prefill": p, "decode": d, "context": c, "requests": n,
                     "ms": ms, "after_idle": False})
    return rows


def test_each_served_row_is_classed_as_its_batch_ran():
    """A timed row's CUDA-graph mode is the server's dispatch of its counts (the table's)."""
    from hisparse_model.answers.clock_fit import _mode
    from hisparse_model.model.plan import plan

    p = plan(Knobs(max_num_seqs=4))
    assert [_mode(p, r) for r in _served_rows(StepCost(1))[1:]] == [m for *_, m in SERVED]


def test_a_mode_the_timer_noted_is_taken_over_the_counts():
    """A row whose runner noted its CUDA-graph mode (step_timer ``modes``) is classed by it:
    the table's first FULL row noted NONE reads NONE, the rest as before."""
    from hisparse_model.answers.clock_fit import _mode
    from hisparse_model.model.plan import plan

    p = plan(Knobs(max_num_seqs=4))
    rows = _served_rows(StepCost(1))[1:]
    rows[0]["modes"] = ["NONE", "FULL"]  # the target's forward first, then its drafter's
    assert [_mode(p, r) for r in rows] == ["NONE"] + [m for *_, m in SERVED[1:]]


def test_a_fit_to_served_batches_gives_the_cost_back():
    """Periods built from 2 ms + 1 us a prompt token + 100 us a decode token + 0.1 us a context
    token, + 35 ms to launch an eager batch, 14 ms a PIECEWISE one and 0.5 us a prompt token of
    either, fit to that cost (15 periods, 7 terms)."""
    from hisparse_model.answers.clock_fit import fit_served
    from hisparse_model.model.plan import plan

    known = StepCost(2, 0.001, 0.1, 0.0001, launch_eager_ms=35, launch_piecewise_ms=14,
                     launch_prefill_ms=0.0005)
    got = fit_served(_served_rows(known), "table", plan(Knobs(max_num_seqs=4)))
    assert (got.base_ms, got.prefill_ms, got.decode_ms, got.context_ms, got.launch_eager_ms,
            got.launch_piecewise_ms, got.launch_prefill_ms) == pytest.approx(
        (2, 0.001, 0.1, 0.0001, 35, 14, 0.0005), rel=1e-6)
    assert ("fitted to 15 of 17 batches measured in the served engine, the others bordering an "
            "idle engine; 4 before an eager batch; 2 before a PIECEWISE one (a price from so "
            "few); each batch's mode read with the knobs given: S 4, graphs of up to 8 tokens"
            ) in got.source


# a served steps file -> its refusal (one line, naming the option and the line)
_ROW = '{"prefill": 1, "decode": 0, "context": 1, "requests": 1, "ms": 3, "after_idle": false}'
BAD_STEPS = [
    ('{"prefill": 1}\n{"prefill": 2}\n', r"line 1: decode None: not a count"),
    ("not json\n", r"line 1: not JSON \(a served replay's steps"),
    (_ROW + "\n" + _ROW.replace('"ms": 3', '"ms": -3') + "\n", r"line 2: ms -3: not a period"),
    (_ROW + "\n" + _ROW.replace('"decode": 0', '"decode": true') + "\n",
     r"line 2: decode True: not a count"),
    (_ROW + "\n" + _ROW.replace("false}", '"no"}') + "\n", r"line 2: after_idle 'no': not true"),
    (_ROW + "\n" + _ROW.replace("}", ', "modes": ["EAGER"]}') + "\n",
     r"line 2: modes \['EAGER'\]: not a list of FULL, PIECEWISE, NONE"),
    (_ROW + "\n" + _ROW + "\n", r"measured batches: 1, a fit needs 7"),
    ('{"rows": 3}', r'no "rows" list'),
]


@pytest.mark.parametrize("text, said", BAD_STEPS)
def test_a_bad_steps_file_is_refused_in_one_line(tmp_path, text, said):
    """A calibration file that is neither the timer's rows nor a sweep is refused naming the
    line and the field, whatever the file is called."""
    path = tmp_path / "measured.txt"
    path.write_text(text)
    with pytest.raises(ClockFitError, match=r"^--step-cost-from-calibration .*" + said):
        from_calibration(str(path), PLAN)


def test_steps_are_told_by_their_content_and_a_folder_names_its_file(tmp_path):
    """Served rows piped in (no .jsonl name) fit as from the file; a folder with no or two
    steps files is refused naming the folder; the run folder finds its steps folder."""
    import shutil
    import tarfile

    with tarfile.open(SERVE / "h100-timed-2026-12-06" / "x6t143.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    run = tmp_path / "x6t143"
    steps = next((run / "steps").glob("steps-*.jsonl"))
    renamed = tmp_path / "batches.txt"
    shutil.copy(steps, renamed)
    import dataclasses

    assert dataclasses.replace(from_calibration(str(renamed), PLAN), source="") == \
        dataclasses.replace(from_calibration(str(run), PLAN), source="")
    shutil.copy(steps, run / "steps" / "steps-2.jsonl")
    with pytest.raises(ClockFitError, match=r"steps: 2 steps-<pid>\.jsonl files \(or "):
        from_calibration(str(run), PLAN)
    with pytest.raises(ClockFitError, match=r": 0 steps-<pid>\.jsonl files"):
        from_calibration(str(tmp_path), PLAN)


def test_a_run_folder_reads_its_batches_with_its_own_knobs(tmp_path):
    """A run's folder classes its batches with its run.json's knobs (x6t143: S 143, graphs of
    up to 272 tokens) whatever knobs are given (S 1,024: up to 512), and says both; its steps
    file alone is classed with the knobs given: more of its prompt batches (273-512 tokens)
    are then PIECEWISE, not eager, so the fit differs."""
    import dataclasses
    import tarfile

    with tarfile.open(SERVE / "h100-timed-2026-12-06" / "x6t143.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    run = tmp_path / "x6t143"
    steps = str(next((run / "steps").glob("steps-*.jsonl")))
    other = plan(Knobs(max_num_seqs=1024, max_model_len=8192, host_pool_gib=6))
    own = from_calibration(str(run), PLAN)
    given = from_calibration(str(run), other)
    assert dataclasses.replace(given, source="") == dataclasses.replace(own, source="")
    assert ("each batch's mode read with the run's own knobs, from its run.json: S 143, graphs "
            "of up to 272 tokens (the knobs given differ: S 1,024, graphs of up to 512 tokens)"
            ) in given.source
    # the replay's knobs beside the run's server's: S and B (given 1,024 and the derived
    # min(1,024 x 8,192, 16,384) = 16,384, the LLM class's default cap; the server ran 143
    # and 8,192), said; none when the run's own are given
    assert ("this replay's knobs are not the run's server's: max_num_seqs 1024 (the run's "
            "143), max_num_batched_tokens 16384 (derived) (the run's 8192): give the run's"
            ) in given.source
    same = Knobs(max_num_seqs=143, max_model_len=8192, max_num_batched_tokens=8192,
                 host_pool_gib=6)
    assert "not the run's server's" not in from_calibration(str(run), plan(same)).source
    # any knob of the run's server, not only the sizes: the routing, the KV cache's dtype
    # (which picks another attention backend too)
    for other_knobs, said in (
            (dataclasses.replace(same, routing="fix"), "routing fix (the run's stock)"),
            (dataclasses.replace(same, kv_cache_dtype="fp8", attention_backend="FLASHMLA_SPARSE"),
             "attention_backend FLASHMLA_SPARSE (the run's FLASH_ATTN_MLA_SPARSE), "
             "kv_cache_dtype fp8 (the run's auto)")):
        assert said in from_calibration(str(run), plan(other_knobs)).source
    alone = from_calibration(steps, other)
    assert ("each batch's mode read with the knobs given: S 1,024, graphs of up to 512 tokens"
            in alone.source) and alone.launch_eager_ms != own.launch_eager_ms
    (run / "run.json").write_text("[]")
    with pytest.raises(ClockFitError, match=r"run\.json: no provenance\.knobs"):
        from_calibration(str(run), PLAN)


def test_a_sweeps_clock_says_what_it_lacks(tmp_path):
    """A calibration sweep ran in process, on its own vLLM: its clock says so (no launch
    term; measured on vLLM 0.34.0 where the server is 0.31.0)."""
    cost = from_calibration(str(CALIBRATION), PLAN)
    assert "(an offline engine in process: no launch of the next batch" in cost.source
    assert "measured on vLLM 0.34.0, this server is 0.31.0" in cost.source
    assert not cost.launches


def test_a_replay_whose_every_request_is_refused_says_so_on_the_clock(tmp_path):
    """On the fitted clock's path too, a trace whose every request the door refuses (three
    400-token prompts with 8 outputs, max_model_len 320: 408 > 320) is refused in one line
    saying why, not as an empty workload."""
    from hisparse_model.answers.traffic_risk import TrafficError

    traffic = _trace(tmp_path, [{"arrival_s": a, "prompt_len": 400, "max_tokens": 8}
                                for a in (0.0, 1.0, 2.0)])
    with pytest.raises(TrafficError, match=r"every request within --minutes 1 \(3\) is refused "
                       r"at the server's door .* max_model_len 320\): nothing is served"):
        serve_on_clock(Knobs(max_num_seqs=4), traffic, 1, fixed(10))
