"""The served replays timed batch by batch (tests/recorded/serve/h100-timed-2026-12-06/): what
each run did, what its engine's batches cost, and the clock fitted to them
(answers/clock_fit.py fit_served, schedule/clock.py launching the next batch).

Invariant: every statement of the folder's README holds of its files: a batch's period follows
how the batch after it runs (a FULL replay: a few ms; PIECEWISE: about 19; eager: about 40),
and the clock fitted to any one run's batches puts every run's requests within the stated
median per-request error and its crash within 0.1 %.
"""

import json
import pathlib
import re
import statistics

import pytest

from hisparse_model.answers.clock_fit import from_calibration
from hisparse_model.answers.finish_times import serve_on_clock
from hisparse_model.inputs.traffic_file import load_traffic
from hisparse_model.answers.clock_fit import _mode
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.plan import plan
from serve_recorded import unpack

HERE = pathlib.Path(__file__).parent
FOLDER = HERE / "recorded" / "serve" / "h100-timed-2026-12-06"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return unpack([FOLDER], tmp_path_factory.mktemp("timed"))


def _run(runs, name) -> dict:
    return json.loads((runs / name / "run.json").read_text())


# run -> (requests answered 200, the HiSparse error's stop and capacity or None, when logged)
OUTCOMES = {
    "x6s128t": (200, None, None),
    "x6t143": (72, (144, 143), 31.21),  # request 72 alone; the 72 before it answered
    "mc1620t": (34, (1621, 1620), 120.022),  # request 34, the cached-prefix batch
    "x3s128t": (200, None, None),
}


@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_each_run_is_a_warm_timed_engine_and_did_what_the_readme_says(runs, name):
    """vLLM 0.31.0 on an H100, comparable (no compilation in the window), every batch timed,
    and the outcome of the README's table."""
    run = _run(runs, name)
    prov = run["provenance"]
    assert (prov["vllm"], prov["torch"], prov["gpu"]) == ("0.31.0", "2.13.0",
                                                         "NVIDIA H100 80GB HBM3")
    assert "step_timer" in prov["run_time_patches"] and "--time-steps" in prov["command"]
    assert run["comparable"] is True and run["deep_gemm_files_grew"] == 0
    assert run["jit_warnings_in_window"] == 0
    steps = list((runs / name / "steps").glob("steps-*.jsonl"))
    assert len(steps) == 1
    assert sum(1 for _ in steps[0].open()) == run["steps_timed"] > 500
    answered, error, logged = OUTCOMES[name]
    client = [json.loads(line) for line in (runs / name / "client.jsonl").open()]
    assert sum(r["status"] == 200 for r in client) == answered
    log = (runs / name / "server.log").read_text(errors="replace")
    found = re.findall(r"stop=(\d+), capacity=(\d+)\.", log)
    assert (tuple(int(x) for x in found[0]) if found else None) == error
    assert run["crash_logged_s"] == logged


def _knobs(runs, name) -> Knobs:
    return Knobs.from_dict(_run(runs, name)["provenance"]["knobs"])


# run -> (batches measured before a FULL replay, their median period ms), the same before a
# PIECEWISE batch and before an eager one: the next batch is launched from Python within this
# batch's period (schedule/clock.py), so the period follows how the next batch runs, whatever
# this one computes. S 128 / 143 capture graphs of up to 256 / 272 tokens, S 1,620 up to 512.
PERIODS = {
    "x6s128t": ((1300, 3.1), (4, 20.0), (76, 42.7)),
    "x6t143": ((454, 3.4), (4, 19.5), (39, 40.8)),
    "x3s128t": ((1902, 3.0), (6, 18.3), (80, 41.3)),
    "mc1620t": ((4574, 3.4), (1, 37.6), (6, 39.9)),  # its one PIECEWISE: as long as eager
}


@pytest.mark.parametrize("name", sorted(PERIODS))
def test_a_batchs_period_follows_how_the_next_one_runs(runs, name):
    """The median period of the batches measured before a FULL replay, a PIECEWISE batch and
    an eager one, each batch's mode read from its counts and the run's CUDA graphs."""
    p = plan(_knobs(runs, name))
    steps = next((runs / name / "steps").glob("steps-*.jsonl"))
    rows = [json.loads(line) for line in steps.open()]
    by = {"FULL": [], "PIECEWISE": [], "NONE": []}
    for r, n in zip(rows, rows[1:]):
        if r["ms"] is not None and not r["after_idle"] and not n["after_idle"]:
            by[_mode(p, n)].append(r["ms"])
    got = tuple((len(by[m]), round(statistics.median(by[m]), 1))
                for m in ("FULL", "PIECEWISE", "NONE"))
    assert got == PERIODS[name]


# fitted to run (rows) -> the median per-request latency error on each run (columns: x6s128t,
# x6t143, x3s128t, mc1620t), against client.jsonl, measured: every fit puts every run under
# 10 % but x6s128t's on mc1620t (11.5 %: the Azure runs' batches say little of Mooncake's long
# contexts); the crashes at 31.207 s (the server logged 31.21) and 120.034-120.039 s (120.022)
# on every fit.  Before the launch of the next batch was modelled (an admission floor and a
# per-token term instead), only x6s128t's fit held (3-11 %); the others gave 13-289 %.
LATENCY = {
    "x6s128t": (4.0, 5.6, 4.6, 11.5),
    "x6t143": (5.9, 4.7, 2.8, 6.1),
    "x3s128t": (7.8, 5.4, 2.6, 7.2),
    "mc1620t": (4.0, 9.5, 8.1, 1.2),
}
CRASHES = {"x6t143": 31.21, "mc1620t": 120.022}  # as the servers logged them


def test_the_fit_to_one_run_reads_its_terms(runs):
    """x6s128t's periods: 2.45 ms + 0.50 us a prompt token + 96.7 us a decode token + 0.083 us
    a context token, + 34.0 ms to launch an eager batch, 13.5 ms a PIECEWISE one and 0.53 us
    a prompt token of either (README)."""
    clock = from_calibration(str(runs / "x6s128t" / "steps"), plan(_knobs(runs, "x6s128t")))
    got = (clock.base_ms, clock.prefill_ms * 1e3, clock.decode_ms * 1e3,
           clock.context_ms * 1e3, clock.launch_eager_ms, clock.launch_piecewise_ms,
           clock.launch_prefill_ms * 1e3)
    assert got == pytest.approx((2.45, 0.50, 96.7, 0.083, 34.0, 13.5, 0.53), rel=0.02)
    assert ("fitted to 1380 of 1408 batches measured in the served engine, the others "
            "bordering an idle engine; 76 before an eager batch; 4 before a PIECEWISE one; each "
            "batch's mode read with the run's own knobs, from its run.json: S 128, graphs of up "
            "to 256 tokens), ") in clock.source


@pytest.mark.parametrize("fitted", sorted(LATENCY))
def test_the_clock_fitted_to_one_run_puts_each_request_where_the_servers_did(runs, fitted):
    """On the clock fitted to one run's batches, every run's median per-request latency error
    is under 10 % (one, 12 %), and a crash within 0.1 % of the server's."""
    clock = from_calibration(str(runs / fitted / "steps"), plan(_knobs(runs, fitted)))
    for name, measured in zip(sorted(LATENCY, key=list(LATENCY).index), LATENCY[fitted]):
        run = _run(runs, name)
        traffic = load_traffic(str(HERE / "traces" / run["trace"]), speed=float(run["speed"]))
        served = serve_on_clock(_knobs(runs, name), traffic, float(run["replay_seconds"]) / 60,
                                clock)
        client = [json.loads(line) for line in (runs / name / "client.jsonl").open()]
        errs = [abs(served.latency_s(r["i"]) - (r["done_s"] - r["due_s"]))
                / (r["done_s"] - r["due_s"])
                for r in client if r["status"] == 200 and r["i"] in served.finish_s]
        assert len(errs) == OUTCOMES[name][0]
        bound = 12.0 if (fitted, name) == ("x6s128t", "mc1620t") else 10.0  # the goal: 10 %
        assert 100 * statistics.median(errs) < bound, (name, measured)
        if name in CRASHES:
            assert abs(served.crash_s - CRASHES[name]) / CRASHES[name] < 0.001
        else:
            assert served.crash_s is None
