"""The exposure analysis: each exposed step kind crashes its example; each 'never' survives a search.

Each exposed kind's example is replayed through ``simulate`` (the exact error,
stop = C + 1, capacity = C); the search serves >= 5,000 (configuration, workload)
pairs -- random traffic and adversarial traffic aimed at C + 1 (idle gaps, bursts
summing to C + 1, chunk boundaries, prefix hits, MTP acceptance) -- and requires no
crash where the analysis says never, and every crash's stop to be a step size the
analysis names where it says exposed.
"""

import json
import random

import pytest

from hisparse_model.exposure import exposure, verify
from hisparse_model.knobs import Knobs
from hisparse_model.plan import plan
from hisparse_model.simulate import simulate
from hisparse_model.workload import Workload

SWAP = ("ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
        "stop={}, capacity={}.")

# knobs, kind, tokens, example requests
EXPOSED = [
    # the fix PR's setup: S = 2, C = 2; a 3-token prompt alone
    (Knobs(), "lone_prompt", 3, [{"prompt_len": 3}]),
    # B = min(2 * 320, 16384) = 640: the last 3-token chunk of a 643-token prompt does not
    # fit max_model_len 320, so no last_chunk; 2 prompts of 2 + 1 are not both > q = 1, so
    # no burst with S = 2 (3 = 2 + 1)
    # vllm serve defaults: S = 1024, B = 8192, C = 1024; 8192 + 1025 = 9217 tokens
    (Knobs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=163840),
     "last_chunk", 1025, [{"prompt_len": 9217}]),
    # max_model_len 1000: no prompt of 1025; two prompts 513 + 512 arriving together
    (Knobs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=1000),
     "burst", 1025, [{"prompt_len": 513}, {"prompt_len": 512}]),
    # MTP K = 2: q = 3, C = 2 * 3 = 6, the 7-token prompt
    (Knobs(num_speculative_tokens=2), "lone_prompt", 7, [{"prompt_len": 7}]),
    # eager, PIECEWISE, FULL_DECODE_ONLY: the no-decode step never replays a FULL graph
    (Knobs(enforce_eager=True), "lone_prompt", 3, [{"prompt_len": 3}]),
    (Knobs(cudagraph_mode="FULL_DECODE_ONLY"), "lone_prompt", 3, [{"prompt_len": 3}]),
    # two data-parallel ranks: S, B and C are per rank; the example goes to rank 0
    (Knobs(data_parallel_size=2), "lone_prompt", 3, [{"prompt_len": 3, "dp_rank": 0}]),
]


@pytest.mark.parametrize("knobs,kind,tokens,requests", EXPOSED)
def test_exposed_kind_replays(knobs, kind, tokens, requests):
    """Each exposed step kind names C + 1 tokens and its example crashes simulate with it."""
    exp = exposure(knobs)
    assert exp.exposed is True
    step = next(s for s in exp.steps if s.kind == kind)
    assert step.tokens == tokens and step.example == {"requests": requests}
    c = plan(knobs).swap_capacity
    assert tokens == c + 1 and step.error == SWAP.format(tokens, c)
    crash = simulate(knobs, Workload.from_json(step.example)).crash
    assert crash is not None and crash["error"] == step.error
    assert verify(knobs, step)


def test_startup_exposure():
    """A start-up crash exposes every workload: S = 1 and FULL graphs crash warming up (C = 1)."""
    knobs = Knobs(max_num_seqs=1, max_model_len=320)
    exp = exposure(knobs)
    first = exp.steps[0]
    if first.kind != "startup":
        pytest.skip("this configuration starts up")
    assert exp.exposed and first.tokens is None
    assert simulate(knobs, Workload.from_json(first.example)).crash["step"] is None


# knobs, the reason's key words
NEVER = [
    (Knobs(attention_backend="FLASHMLA_SPARSE"), "decode part"),  # hands no prefill over
    (Knobs(max_num_seqs=2, max_num_batched_tokens=2, max_model_len=320), "B = 2 <= C = 2"),
    (Knobs(vllm_version="0.32.0"), "routes on C"),
    (Knobs(vllm_version="0.33.0"), "routes on C"),
    (Knobs(routing="fix"), "routes on C"),
    # S = 2, q = 1, max_model_len 3: prompts of 2 tokens; C + 1 = 3 is neither 2 nor 2 + 2
    (Knobs(max_num_seqs=2, max_num_batched_tokens=8, max_model_len=3), "no step without decode"),
]


@pytest.mark.parametrize("knobs,words", NEVER)
def test_never_reasons(knobs, words):
    """Where no traffic can kill the server the answer is 'never' with the gate that holds."""
    exp = exposure(knobs)
    assert exp.exposed is False and not exp.steps and words in exp.never_because


def test_serve_default_done_means():
    """vllm serve's defaults on 0.31.0 are exposed by a 1025-token prompt; each fix is not."""
    base = Knobs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=163840)
    exp = exposure(base)
    assert exp.exposed and exp.steps[0].tokens == 1025
    assert exp.steps[0].example == {"requests": [{"prompt_len": 1025}]}
    for change in ({"attention_backend": "FLASHMLA_SPARSE"}, {"max_num_batched_tokens": 1024},
                   {"vllm_version": "0.32.0"}, {"routing": "fix"}):
        assert exposure(base.replace(**change)).exposed is False, change
    # S 1024 -> 1023 only moves C to 1023: still exposed, by 1024 tokens
    moved = exposure(base.replace(max_num_seqs=1023))
    assert moved.exposed and moved.steps[0].tokens == 1024


def test_json_shape():
    """JSON: {"exposed", "steps": [{"what", "tokens", "example", "error"}], "never_because"}."""
    out = json.loads(json.dumps(exposure(Knobs()).as_json()))
    assert out["exposed"] is True and out["never_because"] is None
    assert {"what", "tokens", "example", "error"} <= set(out["steps"][0])
    assert exposure(Knobs(vllm_version="0.32.0")).as_json()["steps"] == []


def test_undecided_data_parallel():
    """Under DP the traffic gates (max_model_len here) leave an idle rank's dummy batches
    undecided, and MTP is not modelled; the routing's gates (0.32.0) still say never."""
    tiny = Knobs(max_num_seqs=2, max_num_batched_tokens=8, max_model_len=3, data_parallel_size=2)
    assert exposure(tiny).exposed is None and "dummy batches" in exposure(tiny).undecided
    assert exposure(Knobs(num_speculative_tokens=1, data_parallel_size=2)).exposed is None
    assert exposure(Knobs(vllm_version="0.32.0", data_parallel_size=2)).exposed is False


def test_undecided_small_pool():
    """A KV pool too small for the example leaves the verdict undecided, never guessed."""
    # max_model_len 1000: kv_pool.request_blocks(1000) = 176 blocks + the null block start
    # the engine; the 513 + 512 burst (8 outputs each) needs 113 + 113 = 226 > 176
    exp = exposure(Knobs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=1000,
                         num_gpu_blocks_override=177))
    assert exp.exposed is None and exp.undecided and "EXPOSED" not in exp.headline.split(":")[0]


# -- the search ------------------------------------------------------------------------

def _configs(rng: random.Random, count: int) -> list[Knobs]:
    out = []
    while len(out) < count:
        version = rng.choice(["0.31.0", "0.31.0", "0.31.0", "0.32.0", "0.33.0"])
        dp = rng.choice([1] * 9 + [2])
        s, k = rng.randint(1, 5), rng.choice([0, 0, 1, 2]) if dp == 1 else 0
        c = s * (1 + k)
        b = rng.choice([None, s, max(s, k + 1), c, c + 1, c + 2, c + rng.randint(3, 40)])
        try:
            knobs = Knobs(
                vllm_version=version, routing="fix" if version == "0.31.0" and rng.random() < .15
                else "stock", max_num_seqs=s, max_num_batched_tokens=b,
                max_model_len=rng.choice([3, 4, 6, 12, 40, 200]), num_speculative_tokens=k,
                attention_backend=rng.choice(["FLASH_ATTN_MLA_SPARSE"] * 3 + ["FLASHMLA_SPARSE"]),
                cudagraph_mode=rng.choice([None, None, "PIECEWISE", "FULL_DECODE_ONLY", "NONE"]),
                enforce_eager=rng.random() < .1, enable_prefix_caching=rng.random() < .6,
                tensor_parallel_size=rng.choice([1, 1, 1, 2]),
                data_parallel_size=dp)
            plan(knobs)
        except ValueError:
            continue
        out.append(knobs)
    return out


def _workloads(rng: random.Random, knobs: Knobs, count: int) -> list[list[dict]]:
    """Random and adversarial traffic for one configuration."""
    p = plan(knobs)
    c, b, top = p.swap_capacity, p.max_num_batched_tokens, knobs.max_model_len - 1
    n = c + 1
    fit = lambda x: max(1, min(top, x))  # noqa: E731  (a prompt vLLM accepts)
    out = []
    for i in range(count):
        shape = i % 6
        if shape == 0:  # random arrivals, random lengths
            reqs = [{"prompt_len": fit(rng.randint(1, n + 3)), "max_tokens": rng.randint(1, 6),
                     "arrival_step": rng.randint(0, 12)} for _ in range(rng.randint(1, 6))]
        elif shape == 1:  # a burst adding up to C + 1 (or near it), after an idle gap
            parts, left, gap = [], n + rng.choice([0, 0, -1, 1]), rng.randint(0, 20)
            while left > 0:
                x = fit(rng.randint(1, max(1, left)))
                parts.append(x)
                left -= x
            reqs = [{"prompt_len": x, "arrival_step": gap} for x in parts]
        elif shape == 2:  # chunk boundaries: k * B + C + 1 (+-1)
            reqs = [{"prompt_len": fit(rng.randint(1, 3) * b + n + rng.choice([-1, 0, 1]))}]
        elif shape == 3:  # prefix hits: a later prompt sharing 64-token blocks
            first = fit(rng.choice([64, 65, 128, 129]))
            reqs = [{"prompt_len": first, "max_tokens": rng.randint(1, 3)},
                    {"prompt_len": fit(64 * rng.randint(1, 2) + n + rng.choice([0, 1, 64])),
                     "arrival_step": rng.randint(1, 30)}]
        elif shape == 4:  # decodes running while prompts of C + 1 arrive
            reqs = [{"prompt_len": fit(rng.randint(2, 8)), "max_tokens": 20}] + [
                {"prompt_len": fit(n), "arrival_step": rng.randint(1, 8)}]
        else:  # idle gaps between single prompts
            reqs = [{"prompt_len": fit(rng.choice([n - 1, n, n + 1, rng.randint(1, 2 * n)])),
                     "arrival_step": 15 * j, "max_tokens": rng.randint(1, 4)}
                    for j in range(rng.randint(1, 4))]
        out.append(reqs)
    return out


def test_search_finds_no_counterexample():
    """>= 5,000 (configuration, workload) pairs (400 configurations x 20 workloads): 'never'
    never crashes; 'exposed' crashes only with the C + 1 the analysis names, and its examples
    always crash."""
    rng = random.Random(27)
    pairs = exposed = 0
    for knobs in _configs(rng, 400):
        exp = exposure(knobs)
        if exp.exposed is None:  # only an idle DP rank's dummy batches are left undecided
            assert knobs.data_parallel_size > 1 and "dummy batches" in exp.undecided
            continue
        named = {s.tokens for s in exp.steps}
        c = plan(knobs).swap_capacity
        for st in exp.steps:
            assert verify(knobs, st), (knobs, st)
        for reqs in _workloads(rng, knobs, 20):
            accepted = rng.choice([None, "all", {"seed": rng.randint(0, 9)}])
            try:
                crash = simulate(knobs, Workload.from_json(reqs), accepted).crash
            except ValueError:
                continue  # a workload vLLM refuses
            pairs += 1
            if not exp.exposed:
                assert crash is None, (knobs, reqs, accepted, exp.never_because)
            elif crash is not None and crash["step"] is not None:
                exposed += 1
                assert any(crash["error"] == SWAP.format(t, c) for t in named), (knobs, reqs)
    assert pairs >= 5000 and exposed > 0
