"""Five served replays timed batch by batch on the H100 of 2026-12-07
(tests/recorded/serve/h100-timed-2026-12-07/): the crash again on time, the first direct
measurement of each batch's launch and CUDA-graph mode in the served engine, and why the clock
fitted on the first timed H100 (tests/test_served_timed.py) does not carry to this one.

Invariant: what each run's files say is what the tables below state; the model's crash for each
crashed run is the server's step and within 1 % of its time; every batch's CUDA-graph mode as
vLLM's runner dispatched it is the mode the model reads from the batch's counts; and this
machine's own replays differ from each other by more than the issue's 10 % goal, so a clock
fitted to one of them misses another by more than 10 %, while its crash stays within 1 %; the
batches of one run took up to twice what the run's own clock says for them in one window, where
on the first timed H100 every window was within 5 %.
"""

import json
import statistics
from collections import Counter, defaultdict

import pytest

from hisparse_model.answers.clock_fit import _mode, from_calibration
from hisparse_model.answers.finish_times import serve_on_clock
from hisparse_model.inputs.traffic_file import load_traffic
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.plan import plan
from hisparse_model.recorded.serve_recordings import compare, read_run

from serve_recorded import SERVE, TRACES, unpack

FOLDER = SERVE / "h100-timed-2026-12-07"
FIRST = SERVE / "h100-timed-2026-12-06"  # the first H100's timed replays, for comparison


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return unpack([FOLDER], tmp_path_factory.mktemp("second"))


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    return unpack([FIRST], tmp_path_factory.mktemp("first"))


def _run(folder) -> dict:
    return json.loads((folder / "run.json").read_text())


def _rows(folder) -> list[dict]:
    steps = list((folder / "steps").glob("steps-*.jsonl"))
    assert len(steps) == 1
    return [json.loads(line) for line in steps[0].open()]


def _knobs(folder) -> Knobs:
    return Knobs.from_dict(_run(folder)["provenance"]["knobs"])


def _latency(folder) -> dict[int, float]:
    """Each answered request's latency as the client measured it (done - due)."""
    return {r["i"]: r["done_s"] - r["due_s"]
            for r in map(json.loads, (folder / "client.jsonl").open()) if r["status"] == 200}


# run -> (server ready after s, HiSparse error logged at s, requests sent, answered 200, S,
#         DeepGEMM cache files when ready, after the replay, batches timed), from the files.
# x6t143b's server finished the DeepGEMM warm-up the cut first start had begun (625 -> 741
# files at start-up: start-cut/); mc1620t's added the Mooncake shapes at start-up (741 -> 789).
TABLE = {
    "x6t143b": (179.1, 31.256, 99, 72, 143, 741, 741, 485),   # request 72 alone
    "x3s128tb": (71.1, None, 200, 200, 128, 741, 741, 1977),
    "x6s128tb": (71.1, None, 200, 200, 128, 741, 741, 1311),
    "mc1620t": (91.1, 120.066, 35, 34, 1620, 789, 789, 4617),  # request 34, cached prefix
    "x6t143c": (82.1, 31.258, 112, 72, 143, 789, 789, 507),    # x6t143b again
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_run_is_a_warm_timed_engine_and_did_what_the_table_says(runs, name):
    """vLLM 0.31.0 on an H100, comparable (no compilation in the window), every batch timed
    with its launch and modes, and the table's outcome."""
    folder = runs / name
    run = _run(folder)
    prov = run["provenance"]
    assert (prov["vllm"], prov["torch"], prov["gpu"]) == ("0.31.0", "2.13.0",
                                                         "NVIDIA H100 80GB HBM3")
    assert prov["date"].startswith("2026-12-07") and "--time-steps" in prov["command"]
    assert prov["deep_gemm_warmup"].startswith("vLLM's default")
    assert run["comparable"] is True and run["deep_gemm_files_grew"] == 0
    assert run["jit_warnings_in_window"] == 0 and run["stall_cause"] is None
    cache = prov["deep_gemm_cache"]
    got = (run["server_ready_after_s"], run["crash_logged_s"], run["requests_sent"],
           len(_latency(folder)), prov["knobs"]["max_num_seqs"], cache["files_when_ready"],
           cache["files_after_replay"], run["steps_timed"])
    assert got == TABLE[name]
    rows = _rows(folder)
    assert len(rows) == run["steps_timed"]
    assert all(r["launch_ms"] is not None and len(r["modes"]) == 1 for r in rows)


def test_the_cut_first_start_compiled_two_thirds_of_deepgemm_in_four_and_a_half_minutes(
        runs, tmp_path):
    """start-cut/x6t143b.tgz: a fresh machine, an empty DeepGEMM cache, vLLM's own warm-up at
    start-up; the run's 540 s limit cut it at 1,256 of 1,873 shapes (4 min 27 s), before
    /health answered. The next server (x6t143b) compiled the other shapes in 1 min 14 s."""
    folder = unpack([FOLDER / "start-cut"], tmp_path) / "x6t143b"
    run = _run(folder)
    assert run["provenance"]["deep_gemm_cache"]["files_before_start"] is None  # no cache yet
    assert "server_ready_after_s" not in run
    assert "1256/1873 [04:27<" in (folder / "server.log").read_text(errors="replace")
    assert "1873/1873 [01:14<" in (runs / "x6t143b" / "server.log").read_text(errors="replace")


# run -> the step the server died on, (stop, capacity), the model's kind of crash
CRASHES = {
    "x6t143b": ({72: 144}, (144, 143), "lone_prompt"),       # C = min(8192, 143) = 143
    "x6t143c": ({72: 144}, (144, 143), "lone_prompt"),
    "mc1620t": ({34: 1621}, (1621, 1620), "cached_prefix"),  # 2,133 - 512 cached = 1,621
}


@pytest.mark.parametrize("name", sorted(CRASHES))
def test_the_model_crashes_on_the_servers_step_within_one_percent(runs, name):
    """The model's first crash at the step time the server's /metrics read before the replay
    (``scripts/serve_compare.py``) is the step the server died on, within 1 % of its time
    (31.19 s against 31.256 and 31.258; 119.996 against 120.066)."""
    scheduled, stop_capacity, kind = CRASHES[name]
    got = compare(read_run(str(runs / name), str(TRACES)))
    assert got["estimate"]["scheduled"] == got["observed"]["scheduled"] == scheduled
    assert got["observed"]["stop_capacity"] == stop_capacity
    assert got["estimate"]["kind"] == kind
    assert abs(got["estimate"]["crash_s"] - got["observed"]["crash_s"]) <= \
        0.01 * got["observed"]["crash_s"]


# run -> by the batch's own mode (FULL, PIECEWISE, NONE = eager): the batches the runner
# dispatched so, as CudaGraphManager noted them (S 128 / 143 capture graphs of up to 256 / 272
# tokens, S 1,620 up to 512), and their median launch_ms: the time the engine core spent in the
# one-GPU executor's execute_model and sample_tokens for each (input preparation, the
# forward's launch or graph replay, sampling), in the engine core's thread
BY_MODE = {
    "x6t143b": ((429, 4, 52), (3.3, 22.6, 53.2)),
    "x3s128tb": ((1854, 11, 112), (2.6, 17.7, 41.2)),
    "x6s128tb": ((1220, 2, 89), (3.0, 23.4, 49.0)),
    "mc1620t": ((4581, 1, 35), (2.9, 15.9, 53.2)),
    "x6t143c": ((448, 1, 58), (3.2, 20.2, 45.4)),
}


@pytest.mark.parametrize("name", sorted(BY_MODE))
def test_every_batchs_dispatched_mode_is_the_one_the_model_reads_from_its_counts(runs, name):
    """The first check of ``model/dispatch.py`` against vLLM's own dispatcher in a served
    engine: for each of the 8,897 batches, the mode vLLM 0.31.0's runner dispatched is the
    one ``dispatch`` gives the batch's tokens and requests on the server's capture sizes
    (read as the clock's fit reads a batch without notes, ``clock_fit._mode``)."""
    folder = runs / name
    p = plan(_knobs(folder))
    noted, counted = Counter(), Counter()
    for r in _rows(folder):
        mode = _mode(p, {**r, "modes": []})  # the counts alone: model/dispatch.py
        noted[r["modes"][0]] += 1
        counted[(r["modes"][0], mode)] += 1
    assert tuple(noted[m] for m in ("FULL", "PIECEWISE", "NONE")) == BY_MODE[name][0]
    assert all(a == b for a, b in counted), counted


@pytest.mark.parametrize("name", sorted(BY_MODE))
def test_a_batchs_launch_is_milliseconds_even_for_a_full_replay(runs, name):
    """A FULL replay's hand-over is 2.6-3.3 ms, not microseconds (what the clock first
    assumed: the base term holds it), a PIECEWISE one 16-23 ms, an eager one 41-53 ms; and a
    batch followed by a FULL replay lasts about that replay's hand-over and 1 ms more."""
    rows = _rows(runs / name)
    by = defaultdict(list)
    for r in rows:
        by[r["modes"][0]].append(r["launch_ms"])
    got = tuple(round(statistics.median(by[m]), 1) for m in ("FULL", "PIECEWISE", "NONE"))
    assert got == BY_MODE[name][1]
    over = [r["ms"] - n["launch_ms"] for r, n in zip(rows, rows[1:])
            if r["ms"] is not None and not r["after_idle"] and not n["after_idle"]
            and n["modes"] == ["FULL"]]
    assert 0.5 < statistics.median(over) < 1.5  # measured 0.66-1.23 ms


# (run, run) -> the median of |latency b - latency a| / latency a over the requests both
# answered: the same replay twice on this machine, 13 minutes apart, and each run of the first
# H100 against its twin here (that machine's same spec, run 2026-12-06; signed: here slower)
SPREAD = {
    ("x6t143b", "x6t143c"): 14.1,
    ("first/x6t143", "x6t143b"): 49.7,
    ("first/x6s128t", "x6s128tb"): 23.5,
    ("first/x3s128t", "x3s128tb"): 21.3,
    ("first/mc1620t", "mc1620t"): 21.4,
}


def test_the_same_replay_twice_differs_by_more_than_the_clocks_goal(runs, first):
    """No model involved: two runs of one replay on this machine differ by a median 14.1 %
    per request (x6t143c faster: -9.0 % signed), more than the 10 % a clock is to meet; the
    first H100 served every replay 21-50 % faster than this one. A FULL decode's hand-over
    here drifts within a run too (mc1620t: 2.8 ms in its first 5 s, 5.3 ms at 105-110 s)."""
    where = {"first": first}
    for (a, b), measured in SPREAD.items():
        la, lb = (_latency(where[x.split("/")[0]] / x.split("/")[1] if "/" in x else runs / x)
                  for x in (a, b))
        both = sorted(set(la) & set(lb))
        assert len(both) >= 34
        spread = statistics.median(abs(lb[i] - la[i]) / la[i] for i in both)
        assert round(100 * spread, 1) == measured, (a, b)
    rows = _rows(runs / "mc1620t")
    t0 = rows[0]["t"]
    windows = defaultdict(list)
    for r in rows:
        if r["modes"] == ["FULL"] and not r["prefill"]:
            windows[int((r["t"] - t0) // 5) * 5].append(r["launch_ms"])
    assert round(statistics.median(windows[0]), 1) == 2.8
    assert round(statistics.median(windows[105]), 1) == 5.3


FITTED = ("x6t143b", "x3s128tb", "x6s128tb", "mc1620t")  # each run's own clock


@pytest.mark.parametrize("fitted", FITTED)
def test_a_clock_fitted_here_misses_one_of_its_own_replays_yet_crashes_on_time(runs, fitted):
    """The first H100's form (``answers/clock_fit.py fit_served``) fitted to one run of this
    machine: some run of this machine is more than 10 % off (median per request; measured
    22.4-44.1 % at worst, README), as the spread above says it must be; each crash within 1 %."""
    clock = from_calibration(str(runs / fitted / "steps"), plan(_knobs(runs / fitted)))
    worst = 0.0
    for name in TABLE:
        folder = runs / name
        run = _run(folder)
        traffic = load_traffic(str(TRACES / run["trace"]), speed=float(run["speed"]))
        served = serve_on_clock(_knobs(folder), traffic, float(run["replay_seconds"]) / 60,
                                clock)
        measured = _latency(folder)
        errs = [abs(served.latency_s(i) - s) / s for i, s in measured.items()
                if i in served.finish_s]
        assert len(errs) == TABLE[name][3]
        worst = max(worst, statistics.median(errs))
        logged = run["crash_logged_s"]
        if logged is None:
            assert served.crash_s is None
        else:
            assert abs(served.crash_s - logged) / logged < 0.01
    assert worst > 0.10


def _windows(folder) -> dict[int, float]:
    """Each 5 s window of a run's measured periods (at least 100 batches) as a ratio to what
    the run's own fitted clock charges the same batches: its own terms, plus launching the
    next batch where that one is no FULL replay (``fit_served``'s equation, written out)."""
    p = plan(_knobs(folder))
    clock = from_calibration(str(folder / "steps"), p)
    rows = _rows(folder)
    t0 = rows[0]["t"]
    sums = defaultdict(lambda: [0, 0.0, 0.0])  # window -> batches, measured ms, clock ms
    for r, n in zip(rows, rows[1:]):
        if r["ms"] is None or r["after_idle"] or n["after_idle"]:
            continue
        mode = _mode(p, n)
        ms = (clock.base_ms + clock.prefill_ms * r["prefill"] + clock.decode_ms * r["decode"]
              + clock.context_ms * r["context"]
              + (0.0 if mode == "FULL" else clock.launch_ms(mode, n["prefill"])))
        w = sums[int((r["t"] - t0) // 5) * 5]
        w[0] += 1
        w[1] += r["ms"]
        w[2] += ms
    return {k: m / c - 1 for k, (n, m, c) in sums.items() if n >= 100}


# run -> its worst 5 s window, |measured / its own clock - 1| in %, as measured: on the first
# timed H100 every window of every run is within 3.4 %; here x6s128tb's 5-10 s ran 42 % over
# and mc1620t's 105-115 s 89-93 % over what the run's own fit charges those same batches
# (mc1620t's windows before 75 s ran 8-20 % under it)
WORST_WINDOW = {
    "first/x6s128t": 2.5, "first/x6t143": 1.3, "first/x3s128t": 3.4, "first/mc1620t": 2.3,
    "x6s128tb": 41.9, "x6t143b": 11.9, "x3s128tb": 5.4, "mc1620t": 93.4, "x6t143c": 4.5,
}


def test_a_runs_own_clock_follows_each_minute_there_but_not_here(runs, first):
    """A fitted clock's terms are fixed: on a steady host each window of a run sums to what the
    run's own fit charges it (first timed H100: within 5 %); on this host two runs have windows
    far over it (x6s128tb 5-10 s, mc1620t from 105 s), which no fixed terms can follow."""
    where = {"first": first}
    for name, worst in WORST_WINDOW.items():
        folder = where[name.split("/")[0]] / name.split("/")[1] if "/" in name else runs / name
        got = max(abs(d) for d in _windows(folder).values())
        assert round(100 * got, 1) == worst, name
        if name.startswith("first/"):
            assert got < 0.05
    assert _windows(runs / "mc1620t")[105] > 0.9 and _windows(runs / "x6s128tb")[5] > 0.4
