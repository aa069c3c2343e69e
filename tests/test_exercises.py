"""Every "Try this" answer is recomputed here from the model, another way: none can go stale.

Each row names an exercise (notebook, position) and the values its answer must state,
computed from the model's API (``predict``, ``simulate``, ``plan``) and the arithmetic
in the comments, never from :mod:`hisparse_model.views.exercises` itself.
"""

from __future__ import annotations

import pytest

from hisparse_model import Knobs, predict, simulate
from hisparse_model.chart_data import prompt_lanes
from hisparse_model.launch import from_command
from hisparse_model.plan import plan
from hisparse_model.recordings import load_all, summary_row
from hisparse_model.views.controls import UI_RANGE
from hisparse_model.views.exercises import EXERCISES, try_this_html
from hisparse_model.views.two_gpus import two_rank_workload
from hisparse_model.workload import Workload, synthetic


def k(**kw) -> Knobs:
    return Knobs(**{"vllm_version": "0.31.0", **kw})


def _c(**kw):
    try:
        return predict(k(**kw)).sizes.swap_capacity
    except ValueError:
        return None


def _dp_crash(s: int, version: str = "0.31.0"):
    crash = simulate(k(max_num_seqs=s, data_parallel_size=2, vllm_version=version),
                     two_rank_workload(s)).crash
    return None if crash is None else (crash["step"], crash["rank"], bool(crash["scheduled"]))


def _first_bad(pred):
    return next((i + 1 for i, p in enumerate(pred.prompts) if p.ran and not p.ok), None)


EXPECTED = {
    # S = 2, K = 2: q = 1 + 2 = 3, C = min(640, 2 · 3) = 6, W = 7, the crash is n = W
    ("off_by_one", 0): lambda: {"q": 3, "C": 6, "W": 7, "crash": [7]},
    # S = B = 4: C = min(4, 4) = 4 = B; W = 5 > B: no crash
    ("off_by_one", 1): lambda: {"C": 4, "B": 4, "crash": []},
    # B = min(2 · L, 16384) >= 32 > 2 = S · q for every L on the slider: C = 2 throughout
    ("off_by_one", 2): lambda: {"C": sorted({_c(max_num_seqs=2, max_model_len=m)
                                             for m in range(UI_RANGE["max_model_len"][0],
                                                            UI_RANGE["max_model_len"][1] + 1,
                                                            97)}),
                                "range": UI_RANGE["max_model_len"]},
    # C = min(B, 6) for B = 2 … 7 (or refused)
    ("off_by_one", 3): lambda: {"C": {b: _c(max_num_seqs=2, num_speculative_tokens=2,
                                            max_num_batched_tokens=b) for b in range(2, 8)}},
    # captures [1, 2, 4] skip W = 3: start-up survives, the 3-token prompt (prompt 2) crashes
    ("startup", 0): lambda: {"prompt": _first_bad(predict(k(max_num_seqs=2), [2, 3, 200])),
                             "length": 3, "startup_ok": True},
    # eager, S = 1: W = 2, no start-up batch; prompt 1 (2 tokens) is W
    ("startup", 1): lambda: {"startup_ok": True, "prompt": _first_bad(
        predict(k(max_num_seqs=1, enforce_eager=True), [2, 3, 200]))},
    # B = 64: each S one by one through predict (the strip uses the vectorised sweep)
    ("startup", 2): lambda: _strip_by_predict(),
    # B = 64: 67 = 64 + 3; lengths 64·j + 3 < 320 crash (3 = W)
    ("versions", 0): lambda: {"chunks": [64, 3], "crashes": True,
                              "crash_lengths": [3 + 64 * j for j in range(5)]},
    ("versions", 1): lambda: {"same": [
        (p.ok, p.error) for p in predict(k(max_num_seqs=2, routing="fix"), [2, 3, 200]).prompts]
        == [(p.ok, p.error) for p in predict(k(max_num_seqs=2, vllm_version="0.32.0"),
                                             [2, 3, 200]).prompts]},
    # FLASHMLA_SPARSE routes decode tokens only: 2- and 3-token prefills are over q = 1
    ("versions", 2): lambda: {"routed_prefills": []},
    # K = 1: q = 2, C = 4, W = 5: the 5-token prompt, prompt 3
    ("versions", 3): lambda: {"W": 5, "prompts": [3]},
    ("recordings", 0): lambda: {"agree": sum(summary_row(r)["agrees"] for r in load_all()),
                                "total": len(load_all())},
    # 67 = 64 + 3: the second chunk routes n = 3 = W
    ("recordings", 1): lambda: {"routed": 3, "label": "prefill chunk 2/2"},
    # prompts 3 + 2 together: step 0 holds 5 = W = C + 1 tokens (S = 4)
    ("traffic", 0): lambda: {"step": 0, "routed": 5},
    ("traffic", 1): lambda: _traffic_by_simulate(),
    # one step apart: 3 tokens, then a decode and 2: never 5 = W
    ("traffic", 2): lambda: {"crash": simulate(k(max_num_seqs=4), synthetic(2, [3, 2], 1, 8))
                             .crash is not None,
                             "most": max(s.routed_tokens for s in simulate(
                                 k(max_num_seqs=4), synthetic(2, [3, 2], 1, 8)).steps)},
    ("two_gpus", 0): lambda: {"crash": _dp_crash(7)},
    ("two_gpus", 1): lambda: {"crashing": [s for s in range(2, 17) if _dp_crash(s)]},
    ("two_gpus", 2): lambda: {"crash": _dp_crash(7, "0.32.0")},
    # serve's defaults: S = 1024, B = 8192, C = 1024; FLASHMLA_SPARSE routes no prefill
    ("exposure", 0): lambda: _kinds_by_simulate(_served("--attention-backend FLASHMLA_SPARSE")),
    # B = 1024 = C: no step holds C + 1 = 1025 tokens
    ("exposure", 1): lambda: _kinds_by_simulate(_served("--max-num-batched-tokens 1024")),
    ("exposure", 2): lambda: _kinds_by_simulate(_served(version="0.32.0")),
    # max_model_len 1000: a prompt holds at most 999 < 1025 tokens; 513 + 512 together still do
    ("exposure", 3): lambda: _kinds_by_simulate(_served("--max-model-len 1000")),
    # S = 2: C = 2, W = 3; a lone 3-token prompt (no burst: 2 + 1 has a 1-token decode-sized one)
    ("exposure", 4): lambda: _kinds_by_simulate(k(max_num_seqs=2)),
    # B = 2 = C: no step holds 3 tokens
    ("exposure", 5): lambda: _kinds_by_simulate(k(max_num_seqs=2, max_num_batched_tokens=2)),
}

SERVE = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2",
         "--attention-config", '{"hisparse_config": {}}']


def _served(extra: str = "", version: str = "0.31.0") -> Knobs:
    return from_command(SERVE + extra.split(), version).knobs


def _kinds_by_simulate(knobs: Knobs) -> dict:
    """Which canonical C + 1-token workloads crash ``simulate``: a lone prompt of C + 1, a
    prompt whose last chunk is C + 1 (B + C + 1 tokens), two prompts arriving together that
    add up to C + 1 (each longer than q = 1); the stops they crash with."""
    p = plan(knobs)
    c, b, top = p.swap_capacity, p.max_num_batched_tokens, knobs.max_model_len - 1
    half = (c + 1) // 2
    canonical = {"lone_prompt": [c + 1] if c + 1 <= min(b, top) else None,
                 "last_chunk": [b + c + 1] if c + 1 <= b and b + c + 1 <= top else None,
                 "burst": [c + 1 - half, half] if half > 1 and knobs.max_num_seqs >= 2
                 and c + 1 <= b else None}
    kinds, stops = [], set()
    for kind, lens in canonical.items():
        if lens is None:
            continue
        crash = simulate(knobs, Workload.from_json([{"prompt_len": n} for n in lens])).crash
        if crash is not None:
            kinds.append(kind)
            stops.add(int(crash["error"].split("stop=")[1].split(",")[0]))
    return {"exposed": bool(kinds), "tokens": sorted(stops), "kinds": kinds}


def _strip_by_predict() -> dict:
    """The strip by the per-length walk (prompt_lanes), not the vectorised sweep it uses."""
    out = {"startup_crash": [], "runtime_crash": [], "safe": [], "invalid": []}
    for s in range(1, 257):
        knobs = k(max_num_seqs=s, max_num_batched_tokens=64)
        lanes = prompt_lanes(knobs)
        alive, crashes = lanes["startup_ok"]["0.31.0"], lanes["crash_sizes"]["0.31.0"]
        kind = ("invalid" if alive is None else "startup_crash" if not alive else
                "runtime_crash" if crashes else "safe")
        out[kind].append(s)
    return out


def _traffic_by_simulate() -> dict:
    out = {"startup_crash": [], "runtime_crash": [], "safe": []}
    for s in range(1, 65):
        sched = simulate(k(max_num_seqs=s), synthetic(2, [3, 2], 0, 8))
        kind = ("safe" if sched.crash is None else
                "startup_crash" if sched.crash["step"] is None else "runtime_crash")
        out[kind].append(s)
    return out


def test_every_exercise_has_a_check():
    """No answer without a recomputation here (a new exercise needs a row)."""
    assert set(EXPECTED) == {(nb, i) for nb, exs in EXERCISES.items() for i in range(len(exs))}


@pytest.mark.parametrize("key", sorted(EXPECTED), ids=lambda key: f"{key[0]}-{key[1]}")
def test_each_answer_states_what_the_model_says(key):
    """The answer's values equal the model's, recomputed another way."""
    nb, i = key
    assert EXERCISES[nb][i].answer().values == EXPECTED[key]()


@pytest.mark.parametrize("nb", sorted(EXERCISES))
def test_answers_are_folded_away(nb):
    """Each question shows; its answer is in a closed <details>, one click to open."""
    markup = try_this_html(nb)
    assert markup.count("<details class='hs-answer'>") == len(EXERCISES[nb])
    assert " open" not in markup
