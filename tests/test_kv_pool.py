"""The KV pool (num_gpu_blocks_override): what vLLM admits, how it caps the JIT warmup, when the model declines.

Invariant: the model's pool arithmetic equals vLLM's — the admission threshold
and the worker's KV-cache groups equal what vLLM's own planner gives on CPU
(tests/test_startup_crosscheck.py drives it), and the capped warmup request
count equals what the H200 ran (the ``*-blocks100`` recordings).
"""

import json

import pytest

from hisparse_model import Knobs, predict, simulate, plan
from hisparse_model.model.kv_layout import layout
from hisparse_model.model.kv_pool import admission_blocks, warmup_request_cap
from hisparse_model.recorded.recordings import recorded_dir
from hisparse_model.schedule.workload import Workload

# (K, max_model_len, B, smallest pool vLLM admits): found by bisecting num_gpu_blocks_override
# over vLLM's own planner on CPU (crosscheck/scheduler_build.plan_kv_cache, async scheduling
# as the engine has it).  Per request: the indexer group cdiv(L, 64); per layer (8, + 1 MTP
# layer with K) a resident group cdiv(min(2B, L), 64) and a hot group cdiv((K+2)*128, 64);
# plus the null block.
ADMITTED = [
    (0, 1, 2048, 42),      # 1 + 8*(1 + 4) + 1
    (0, 64, 2048, 42),     # 1 + 8*(1 + 4) + 1
    (0, 65, 2048, 51),     # 2 + 8*(2 + 4) + 1
    (0, 320, 2048, 78),    # 5 + 8*(5 + 4) + 1
    (0, 1000, 2048, 177),  # 16 + 8*(16 + 4) + 1
    (0, 4096, 8192, 609),  # 64 + 8*(64 + 4) + 1
    (1, 64, 2048, 65),     # 1 + 9*(1 + 6) + 1
    (1, 320, 2048, 105),   # 5 + 9*(5 + 6) + 1
    (2, 1000, 2048, 233),  # 16 + 9*(16 + 8) + 1
    (0, 320, 6, 46),       # 5 + 8*(cdiv(12, 64)=1 + 4) + 1: only 2B in flight
    (0, 320, 100, 70),     # 5 + 8*(cdiv(200, 64)=4 + 4) + 1
    (0, 2048, 300, 145),   # 32 + 8*(cdiv(600, 64)=10 + 4) + 1
    (1, 2048, 35, 105),    # 32 + 9*(cdiv(70, 64)=2 + 6) + 1
    (2, 320, 17, 87),      # 5 + 9*(1 + 8) + 1
    (1, 4096, 1000, 407),  # 64 + 9*(cdiv(2000, 64)=32 + 6) + 1
]


@pytest.mark.parametrize("k,length,b,smallest", ADMITTED)
def test_admission_threshold(k, length, b, smallest):
    """A pool one block short of vLLM's threshold is refused, naming the knob; the threshold starts."""
    assert admission_blocks(length, b, layout(Knobs(num_speculative_tokens=k))) + 1 == smallest
    kn = Knobs(max_num_seqs=1, max_model_len=length, num_speculative_tokens=k,
               max_num_batched_tokens=b)
    plan(kn.replace(num_gpu_blocks_override=smallest))
    with pytest.raises(ValueError, match=r"^num_gpu_blocks_override: "):
        plan(kn.replace(num_gpu_blocks_override=smallest - 1))


# (S, K, pool, warmup requests): min(S, B // (q + 1)) capped at (pool - 1) // per-request,
# per-request = groups x cdiv(min((q + 1) + steps * q + K, L), 64), steps 3 (5 with K).
CAPS = [
    (8, 0, 100, 5),      # 18 groups x cdiv(2 + 3, 64)=1 -> 99 // 18 = 5 < 8
    (8, 0, 200, 8),      # 199 // 18 = 11 >= 8: no cap
    (30, 2, 400, 19),    # 20 groups x cdiv(4 + 15 + 2, 64)=1 -> 399 // 20 = 19
    (4, 1, 106, 4),      # 20 x 1 -> 105 // 20 = 5 >= 4
    (64, 0, 78, 4),      # 77 // 18 = 4
]


@pytest.mark.parametrize("s,k,pool,reqs", CAPS)
def test_warmup_request_cap(s, k, pool, reqs):
    """The JIT warmup's prefill runs min(S, B // (q + 1), cap) requests of q + 1 tokens."""
    kn = Knobs(vllm_version="0.32.0", max_num_seqs=s, num_speculative_tokens=k,
               num_gpu_blocks_override=pool)
    prefill = next(b for b in predict(kn).startup if b.phase == "jit_warmup")
    assert (prefill.num_reqs, prefill.num_tokens) == (reqs, reqs * (k + 2))
    assert warmup_request_cap(kn) >= reqs


@pytest.mark.parametrize("name", ["v0.32.0-stock-s8-blocks100.json",
                                  "v0.33.0-stock-s8-blocks100.json"])
def test_cap_binds_on_the_h200(name):
    """Live: a 100-block pool, 18 groups, so the warmup prefill ran 5 requests of 2 tokens, not 8."""
    with open(f"{recorded_dir()}/{name}") as f:
        rec = json.load(f)
    assert rec["engine"]["kv_cache_num_blocks"] == 100
    assert rec["engine"]["kv_cache_groups"] == layout(Knobs()).worker_groups == 18
    first_warmup = next(r for r in rec["routing_log"] if r["phase"] == "jit_warmup")
    assert first_warmup["num_tokens"] == 10  # 5 requests x (q + 1 = 2) tokens


def test_serving_shortfall_is_declined():
    """A pool that could run short while serving is refused, not guessed at (one line, the knob)."""
    kn = Knobs(max_num_seqs=2, enable_prefix_caching=False, num_gpu_blocks_override=100)
    predict(kn, [2, 3, 200])  # one at a time: the largest needs 9*4 + 32 = 68 <= 99
    cached = kn.replace(enable_prefix_caching=True)  # blocks stay cached: 41 + 41 + 68 > 99
    with pytest.raises(ValueError, match=r"^num_gpu_blocks_override: .* run short"):
        predict(cached, [2, 3, 200])
    together = Workload.from_json({"requests": [{"prompt_len": 200}, {"prompt_len": 200}]})
    with pytest.raises(ValueError, match=r"^num_gpu_blocks_override: "):
        simulate(kn, together)  # 68 + 68 > 99


def test_default_pool_never_caps():
    """Without the knob the pool is what profiling leaves (~590,000 blocks on the H200): no cap."""
    assert warmup_request_cap(Knobs(max_num_seqs=256)) is None


# (model, K, max_model_len, B, pool blocks, requests held at once, blocks to start):
# a request of L tokens claims (1 + G) x cdiv(L, 64) + G x cdiv((K + 2) x topk, 64), G hot groups
HELD = [
    # tiny: G = 8, hot 4: (9 x 5 + 32 = 77) per 320-token request; 590,000 // 77 = 7,662;
    # start: 5 + 8 x (5 + 4) + 1 = 78
    ("reproduction", 0, 320, 640, 590_001, 7662, 78),
    # DeepSeek-V3.2 bf16: G = 11, hot 64: 12 x 2,560 + 704 = 31,424 per 163,840-token request;
    # start: 2,560 + 11 x (cdiv(min(16,384, 163,840), 64) = 256 + 64) + 1 = 6,081
    ("deepseek-ai/DeepSeek-V3.2", 0, 163_840, 8192, 100_001, 3, 6081),
    # with MTP: 62 layers, 7 a group, G = 9, hot cdiv(3 x 2,048, 64) = 96:
    # 10 x 128 + 864 = 2,144 per 8,192-token request; start 128 + 9 x (128 + 96) + 1 = 2,145
    ("deepseek-ai/DeepSeek-V3.2", 1, 8192, 8192, 2_145, 1, 2145),
]


@pytest.mark.parametrize("model,k,length,b,pool,held,start", HELD)
def test_what_the_gpu_pool_holds(model, k, length, b, pool, held, start):
    """A pool holds (blocks - 1) // a max_model_len request's blocks at once; it starts at the
    admission blocks + the null block (the same threshold vLLM's planner refuses below)."""
    from hisparse_model.model.kv_pool import pool_line, requests_held

    kn = Knobs(model=model, num_speculative_tokens=k, max_model_len=length,
               max_num_batched_tokens=b, max_num_seqs=2, host_pool_gib=64)
    assert requests_held(pool, length, layout(kn)) == held
    assert admission_blocks(length, b, layout(kn)) + 1 == start
    assert pool_line(kn, b, pool).startswith(f"{pool} blocks: {held} requests of max_model_len")
    assert f"must hold {start} blocks to start" in pool_line(kn, b)
