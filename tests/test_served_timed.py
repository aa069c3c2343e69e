"""The served replays timed batch by batch (tests/recorded/serve/h100-timed-2026-12-06/): what
each run did, what its engine's batches cost, and the clock fitted to them
(answers/clock_fit.py fit_served, schedule/clock.py admit_ms and next_prefill_ms).

Invariant: every statement of the folder's README holds of its files: the crashes where the
model puts them within 1 %, the period before an admitting batch about 40 ms on every run, and
the clock fitted to one run's batches within the stated median per-request error on each.
"""

import json
import pathlib
import re
import statistics
import tarfile

import pytest

from hisparse_model.answers.clock_fit import from_calibration
from hisparse_model.answers.finish_times import serve_on_clock
from hisparse_model.inputs.traffic_file import load_traffic
from hisparse_model.model.knobs import Knobs

HERE = pathlib.Path(__file__).parent
FOLDER = HERE / "recorded" / "serve" / "h100-timed-2026-12-06"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("timed")
    for packed in sorted(FOLDER.glob("*.tgz")):
        with tarfile.open(packed) as tar:
            tar.extractall(out, filter="data")
    return out


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


@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_a_batch_before_an_admission_lasts_about_40_ms(runs, name):
    """The median period of the batches before one that admits a request, among those whose
    own terms say under 20 ms, is 39.6-41.6 ms on every run (README: 41.5, 40.1, 39.7, 40.4)."""
    cost = from_calibration(str(runs / name / "steps"))
    assert 39.6 <= cost.admit_ms <= 41.6
    assert 4.9e-3 <= cost.next_prefill_ms  # us a prompt token of the next batch, ms here


# run -> the median per-request latency error bound with the clock fitted to x6s128t's
# batches (measured: 3.1, 7.4, 10.6, 6.1 %), and the crash on it against the server's log
LATENCY = {
    "x6s128t": (0.05, None),
    "x6t143": (0.10, 31.21),
    "mc1620t": (0.12, 120.022),
    "x3s128t": (0.10, None),
}


@pytest.fixture(scope="module")
def clock(runs):
    return from_calibration(str(runs / "x6s128t" / "steps"))


def test_the_fit_to_one_run_reads_its_terms(clock):
    """x6s128t's periods: 2.60 ms + 0.57 us a prompt token + 107 us a decode token + 0.07 us a
    context token + 5.07 us a prompt token of the next batch, at least 41.5 ms before an
    admission (README)."""
    got = (clock.base_ms, clock.prefill_ms * 1e3, clock.decode_ms * 1e3, clock.context_ms * 1e3,
           clock.next_prefill_ms * 1e3, clock.admit_ms)
    assert got == pytest.approx((2.60, 0.57, 107, 0.071, 5.07, 41.5), rel=0.02)
    assert "served engine" in clock.source


@pytest.mark.parametrize("name", sorted(LATENCY))
def test_the_clock_fitted_to_one_run_puts_each_request_where_the_servers_did(runs, clock, name):
    """On the clock fitted to x6s128t's batches the median per-request latency error is under
    the bound on each run, and a crash is within 1 % of the server's."""
    run = _run(runs, name)
    knobs = Knobs(**{k: v for k, v in run["provenance"]["knobs"].items()
                     if k in Knobs.__dataclass_fields__})
    traffic = load_traffic(str(HERE / "traces" / run["trace"]), speed=float(run["speed"]))
    served = serve_on_clock(knobs, traffic, float(run["replay_seconds"]) / 60, clock)
    client = [json.loads(line) for line in (runs / name / "client.jsonl").open()]
    errs = [abs(served.latency_s(r["i"]) - (r["done_s"] - r["due_s"])) / (r["done_s"] - r["due_s"])
            for r in client if r["status"] == 200 and r["i"] in served.finish_s]
    bound, crash = LATENCY[name]
    assert len(errs) == OUTCOMES[name][0]
    assert statistics.median(errs) < bound
    if crash is None:
        assert served.crash_s is None
    else:
        assert abs(served.crash_s - crash) / crash < 0.01
