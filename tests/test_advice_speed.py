"""The fast advice paths answer exactly what the exhaustive ones answer.

``serving.served_one_after_another`` (one engine loop, runs reused across S and B where
neither bound forced a decision) against ``served_one_after_another_exhaustive`` (each
prefix of the prompts scheduled anew); ``predict.crashes`` against
``predict(...).crashes`` (the same ValueError where it raises); and ``advise`` with both.
"""

import json
import random

import pytest

from hisparse_model.schedule import serving
from hisparse_model.answers.advice import SEQS_MAP, advise, prediction_crashes
from hisparse_model.model.knobs import Knobs
from hisparse_model.answers.predict import crashes, predict
from hisparse_model.schedule.scheduler import SchedulerConfig


def _verdict(f, *args):
    try:
        return f(*args)
    except ValueError as exc:
        return f"ValueError: {exc}"


def test_one_run_matches_each_prefix_scheduled_anew():
    """Hits of prompts served one after another: one run == every prefix re-scheduled, for
    random configurations asked in sequence (so earlier runs are reused for later S, B)."""
    rng = random.Random(5)
    serving.REUSABLE.clear()
    serving.served_one_after_another.cache_clear()
    lens_pool = [tuple(rng.randint(1, 300) for _ in range(rng.randint(2, 10))) for _ in range(6)]
    lens_pool.append(tuple(range(60, 70)))  # 64-token boundaries: hits of 0 and 64
    checked = 0
    for _ in range(160):
        k = rng.choice([0, 0, 1, 2])
        version = rng.choice(["0.31.0", "0.32.0", "0.33.0"])
        b = rng.choice([3, 8, 64, 65, 66, 100, 129, 640, 16384])
        cfg = SchedulerConfig(max_num_seqs=rng.randint(1, min(b, 8)), max_num_batched_tokens=b,
                              max_model_len=320 + k, num_speculative_tokens=k,
                              vllm_version=version)
        lens = rng.choice(lens_pool)
        want = serving.served_one_after_another_exhaustive(cfg, lens)
        assert serving.served_one_after_another(cfg, lens) == want, (cfg, lens)
        one_run = serving._served_in_one_run(cfg, lens)  # answers itself, no fallback
        assert one_run is not None and one_run[0] == want, (cfg, lens)
        checked += 1
    assert checked == 160 and serving.REUSABLE  # runs were kept for reuse


# knobs, prompt lengths
CASES = [
    (Knobs(), [2, 3, 200]),  # the fix PR's: the 3-token prompt crashes (C = 2)
    (Knobs(max_num_seqs=3), [2, 3, 200]),  # C = 3: safe
    (Knobs(max_num_seqs=64), list(range(1, 66))),  # C = 64: 65 after 64 hits a block
    (Knobs(max_num_seqs=64, enable_prefix_caching=False), list(range(1, 66))),  # 65 crashes
    (Knobs(max_num_seqs=2, max_num_batched_tokens=2), list(range(1, 30))),  # B = C: chunks
    (Knobs(max_num_seqs=4, num_speculative_tokens=1), [9, 100, 200]),  # C = 8: 9 crashes
    (Knobs(max_num_seqs=1), [2]),  # start-up crashes
    (Knobs(vllm_version="0.32.0"), [2, 3, 200]),  # never
    (Knobs(), [400]),  # refused: longer than max_model_len 320
    (Knobs(max_num_seqs=2, num_gpu_blocks_override=40), [200, 200, 200]),  # pool refusal
    # identical prompts, then the crashing one last (each (length, hit) walked once)
    (Knobs(max_num_seqs=2), [100] * 40 + [3]),
    # B = 33: a 100-token prompt after a 64-token hit computes 36 = 33 + 3 tokens: 3 = C + 1
    (Knobs(max_num_seqs=2, max_num_batched_tokens=33), [100, 100]),
]


@pytest.mark.parametrize("knobs,lens", CASES)
def test_fast_crash_test_matches_predict(knobs, lens):
    """predict.crashes(knobs, lens) == predict(knobs, lens).crashes, errors included."""
    assert _verdict(crashes, knobs, lens) == _verdict(lambda k, l: predict(k, l).crashes,
                                                      knobs, lens)


@pytest.mark.parametrize("knobs,lens", [
    (Knobs(), [2, 3, 200]),
    (Knobs(max_num_seqs=2), [1, 2, 3, 64, 65, 70]),
    (Knobs(max_num_seqs=4, num_speculative_tokens=1), [9, 100]),
])
def test_fast_advice_matches_exhaustive(knobs, lens):
    """advise() gives the same advice, in the same order, with the fast crash test."""
    fast = advise(knobs, prediction_crashes(lens), longest_prompt=max(lens), seqs_map=SEQS_MAP)
    slow = advise(knobs, prediction_crashes(lens, fast=False), longest_prompt=max(lens),
                  seqs_map=SEQS_MAP)
    assert fast == slow and fast


# (engine steps of the crash replay) -> the advice's budget of re-simulated engine steps
BUDGET_ROWS = [(1, None), (2_000, None),  # short workloads: the advice searches as before
               (2_001, 4_002), (7_153, 14_306)]  # long: twice the replay's steps


def test_long_workloads_bound_their_advice_by_engine_steps():
    """The advice on a workload of over 2,000 replayed steps may re-simulate at most twice as
    many engine steps; past that, a check that would schedule one more step stops its search."""
    from hisparse_model.answers.advice import SearchCapped
    from hisparse_model.answers.verdict import StepBudget, advice_budget

    for steps, budget in BUDGET_ROWS:
        got = advice_budget(steps)
        assert (got.steps if got else None) == budget, steps
    b = StepBudget(2)
    b.spend()
    b.spend()
    assert not b.capped
    with pytest.raises(SearchCapped, match="budget of 2 engine steps"):
        b.spend()
    assert b.capped


def test_the_crash_of_a_long_trace_shaped_workload_comes_first_and_its_advice_is_bounded(
        tmp_path, capsys):
    """The bundled example traffic's seed 0 against vllm serve's default 0.31.0 server (C =
    min(8192, 1024) = 1024): its crash workload (1,761 requests) replays to the traffic run's
    crash step and error; the advice search stops at its budget and says so, and each change
    it gives is one the model verifies (simulate with it: no crash)."""
    from hisparse_model import bench, cli
    from hisparse_model.answers.simulate import simulate
    from hisparse_model.answers.traffic_risk import estimate, load_traffic
    from hisparse_model.views.risk_chart import example_traffic_path

    knobs, work = bench.crash_workload()
    [run] = estimate(knobs, load_traffic(example_traffic_path()), 30, seeds=1).runs
    assert len(work.requests) == 1761 and run.crash_step == 7153
    path = tmp_path / "crash.json"
    path.write_text(json.dumps(work.as_json()))
    assert cli.main(["simulate", "--max-num-seqs", "1024", "--max-num-batched-tokens", "8192",
                     "--max-model-len", "163840", "--host-pool-gib", "512", "--workload", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["crash"]["step"], out["crash"]["error"]) == (run.crash_step, run.error)
    assert out["advice_stopped_early"].startswith("the advice search stopped early: its budget")
    assert out["advice"]
    for advice in out["advice"]:
        assert simulate(knobs.replace(**advice["change"]), work).crash is None, advice
