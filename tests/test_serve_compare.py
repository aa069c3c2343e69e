"""A served replay's recording against the model (recorded/serve_recordings.py): the step time is
what the server's own /metrics said, the estimate is simulate --traffic's at that step time, and
the observed crash is read from vLLM's own error and input dump."""

import json
import subprocess
import sys

import pytest

from hisparse_model.recorded.serve_recordings import (compare, estimate, measured_step, observed,
                                                      read_run, step_before)

import serve_recorded
from serve_recorded import HERE, TRACES, sample

X4, X6, TRACES = str(serve_recorded.X4), str(serve_recorded.X6), str(TRACES)
ITL = "vllm:inter_token_latency_seconds"


# (run, last snapshot used): with no crash or stall recorded, the whole run's snapshots
@pytest.mark.parametrize("folder,last", [(X4, 30.0), (X6, 40.0)])
def test_the_measured_step_is_the_itl_between_the_first_and_last_snapshot(folder, last):
    """Δsum / Δcount of the inter-token latency from metrics-0 to the last snapshot."""
    run = read_run(folder, TRACES)
    a, b = run.snapshots[0.0], run.snapshots[last]
    want = 1000 * (sample(b, ITL + "_sum") - sample(a, ITL + "_sum")) / (
        sample(b, ITL + "_count") - sample(a, ITL + "_count"))
    assert measured_step(run).ms == pytest.approx(want)
    assert measured_step(run).source.endswith(f"metrics-0..{last:g}")
    assert measured_step(run, until_s=22.0).source.endswith("metrics-0..20")  # a shorter window
    with pytest.raises(ValueError, match="fewer than two /metrics snapshots"):
        measured_step(run, until_s=1.0)


def _cli(run, step_ms: float) -> tuple[int, str]:
    """simulate --traffic's answer for the run's replay (the command-line path): its exit
    status and standard output (its error line when it declines)."""
    k = run.knobs
    out = subprocess.run(
        [sys.executable, "-m", "hisparse_model", "simulate", "--vllm", k.vllm_version,
         "--max-num-seqs", str(k.max_num_seqs), "--max-model-len", str(k.max_model_len),
         "--max-num-batched-tokens", str(k.max_num_batched_tokens), "--traffic", run.trace,
         "--host-pool-gib", str(k.host_pool_gib),
         "--speed", str(run.run["speed"]), "--minutes", str(run.run["replay_seconds"] / 60),
         "--step-ms", str(step_ms), "--json"], capture_output=True, text=True)
    return out.returncode, out.stdout if out.returncode == 0 else out.stderr


def _with_pool(folder: str, gib: float):
    run = read_run(folder, TRACES)
    run.knobs = run.knobs.replace(host_pool_gib=gib)
    return run


# (run, host pool GiB, step time, crash time the model gives): both runs had the
# reproduction's 1 GiB (1,820 blocks), which their requests may outgrow at the step time each
# server measured during its replay (x6 ~93 ms, x4 69.8 ms: requests pile up; the model
# declines, as simulate does); with the runner's 5 GiB, at x6 request 72 (144 tokens) reaches an idle
# server at 187.2 s / 6 = 31.2 s for fast steps, and at the ~93 ms the x6 server measured
# it meets running decodes and nothing crashes within the 40 s replayed
@pytest.mark.parametrize("folder,gib,step_ms,crash_s", [
    (X6, 1, None, None), (X4, 1, None, None), (X6, 5, 10.0, 31.2), (X6, 5, 93.0, None)])
def test_the_estimate_is_simulate_traffics(folder, gib, step_ms, crash_s):
    """The estimate equals simulate --traffic's for the same replay, pool and step time,
    a refusal included."""
    run = _with_pool(folder, gib)
    step_ms = measured_step(run).ms if step_ms is None else step_ms
    est, (status, text) = estimate(run, step_ms), _cli(run, step_ms)
    if gib == 1:
        assert est.declined and est.declined.startswith(
            "host_pool_gib: 1 GiB (1820 host blocks, the fix PR's tiny DeepSeek-V3.2: 8 layers, "
            "index_topk 128, bf16 rows of 1,152 bytes) may run short serving")
        assert status == 2 and text.strip().endswith(est.declined.split(": ", 1)[1])
        return
    cli = json.loads(text)["seeds"][0]
    assert est.declined is None and (est.crash_s is None) == (not cli["crashed"])
    if crash_s is None:
        assert est.crash_s is None
        return
    assert est.crash_s == pytest.approx(crash_s, abs=step_ms / 1000)
    assert est.crash_s == pytest.approx(cli["crash_step"] * step_ms / 1000)
    assert (est.kind, est.scheduled) == (cli["kind"], {72: 144}) and "stop=144" in est.error


def test_the_observed_crash_is_read_from_vllms_error_and_input_dump():
    """vLLM's input dump of the step that raised names its requests and their tokens: on a
    real 0.31.0 dump (the concurrent workload's engine log) with its recorded error, the
    parse is the recording's crash step."""
    rec = json.loads((HERE / "recorded" / "workloads" / "w-v0.31.0-stock-concurrent.json")
                     .read_text())
    dump = next(l for l in (HERE / "recorded" / "logs" / "w-v0.31.0-stock-concurrent.log")
                .read_text().splitlines() if "Dumping scheduler output" in l)
    run = read_run(X6, TRACES)
    run.log = rec["crash"]["error"] + "\n" + dump + "\n"
    run.run = {**run.run, "crash_logged_s": 1.5}
    obs = observed(run)
    step = rec["steps"][rec["crash"]["step"]]
    assert obs.scheduled == {int(i): n for i, n in step["scheduled"].items()} == {0: 3, 1: 2}
    assert obs.stop_capacity == (5, 4) and obs.crash_s == 1.5
    # without the HiSparse error the dump is not read as one
    run.log = dump
    assert observed(run).scheduled == {} and observed(run).stop_capacity is None


def test_the_step_before_the_replay_is_the_warmed_servers():
    """x6 was warmed: its /metrics over the last warm-up pass (metrics-warm to metrics-0,
    recomputed here from the raw samples) said 8.9 ms a step, and that is the step time the
    comparison uses; x4 had no warm-up, so it uses the replay's own window."""
    run = read_run(X6, TRACES)
    want = 1000 * (sample(run.snapshots[0.0], ITL + "_sum") - sample(run.warm, ITL + "_sum")) / (
        sample(run.snapshots[0.0], ITL + "_count") - sample(run.warm, ITL + "_count"))
    assert step_before(run).ms == pytest.approx(want) and round(want, 1) == 8.9
    row = compare(run)
    assert row["step_ms"] == round(want, 1) and "warm-up" in row["step_from"]
    assert row["step_ms_during"] == round(measured_step(run).ms, 1)
    x4 = read_run(X4, TRACES)
    assert step_before(x4) is None
    assert compare(x4)["step_ms"] == round(measured_step(x4).ms, 1)


def test_what_the_recorded_runs_say_against_the_model():
    """Both runs had the reproduction's 1 GiB host pool (1,820 blocks).  At x6's 8.9 ms a step
    the blocks its requests hold stay within the 1,819 besides the null block (a finished
    request's are freed two steps after its output is processed, as vLLM's deferred free
    does), and the model's crash is request 72 alone at 31.19 s, as with 5 GiB; the server
    logged no error: it had stalled by 25 s (README).  At x4's in-replay 69.8 ms the requests
    pile up: they can hold 1,898 blocks by engine step 711 (49.6 s), so the model declines.
    The script prints one row per run."""
    x6, x4 = compare(read_run(X6, TRACES)), compare(read_run(X4, TRACES))
    est = x6["estimate"]
    assert est["declined"] is None and est["crash_s"] == pytest.approx(31.19, abs=0.01)
    assert (est["scheduled"], est["kind"]) == ({72: 144}, "lone_prompt")
    est = x4["estimate"]
    assert est["crash_s"] is None and est["scheduled"] == {}
    assert "by engine step 711 its requests can hold 1898 blocks" in est["declined"]
    assert round(est["declined_s"], 1) == 49.6
    for row in (x6, x4):
        assert row["observed"]["crash_s"] is None and row["observed"]["stop_capacity"] is None
        assert "crash_s_off_by" not in row
    five = compare(_with_pool(X6, 5))["estimate"]  # the runner's pool now, at the same 8.9 ms
    assert five["declined"] is None and five["crash_s"] == pytest.approx(31.2, abs=0.01)
    assert (five["scheduled"], five["kind"]) == ({72: 144}, "lone_prompt")
    out = subprocess.run([sys.executable, str(HERE.parent / "scripts" / "serve_compare.py"),
                          X4, X6], capture_output=True, text=True, check=True).stdout
    assert out.count("| v0.31.0-s143-azure-") == 2
    assert ("| 69.8 ms (during the replay) | declines: the host pool may run short by 49.6 s "
            "| - | - |") in out
    assert "| 8.9 ms (before the replay) | 31.19 s | {72: 144} | lone_prompt | - |" in out


H5, H1 = str(serve_recorded.H100_5GIB), str(serve_recorded.H100_1GIB)


def test_what_the_h100_runs_say_against_the_model():
    """The two H100 replays of 2026-12-06 beside the model at the step time each server's
    /metrics read over its last warm-up pass: with 5 GiB and with 1 GiB the model's first
    crash is request 72 alone (144 tokens, a lone prompt) at 187.2 s / 6 = 31.19 s (at 1 GiB
    the blocks held stay within the pool: finished requests' are freed); neither server
    logged an error: the 5 GiB one made no step from 30 s to its stop, the 1 GiB one was
    still serving requests 63-71 when 72 came (their steps took seconds, not 7.4 ms:
    tests/test_serve_run.py)."""
    five, one = compare(read_run(H5, TRACES)), compare(read_run(H1, TRACES))
    assert (five["step_ms"], one["step_ms"]) == (13.2, 7.4)  # ms, over the last warm-up pass
    for row in (five, one):
        est = row["estimate"]
        assert est["declined"] is None and est["crash_s"] == pytest.approx(31.19, abs=0.014)
        assert (est["scheduled"], est["kind"]) == ({72: 144}, "lone_prompt")
        assert "stop=144, capacity=143" in est["error"]
    for row in (five, one):
        assert row["observed"]["crash_s"] is None and row["observed"]["stop_capacity"] is None
