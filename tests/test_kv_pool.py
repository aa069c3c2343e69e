"""The KV pool (num_gpu_blocks_override): what vLLM admits, how it caps the JIT warmup, when the model declines.

Invariant: the model's pool arithmetic equals vLLM's — the admission threshold
and the worker's KV-cache groups equal what vLLM's own planner gives on CPU
(tests/test_startup_crosscheck.py drives it), and the capped warmup request
count equals what the H200 ran (the ``*-blocks100`` recordings).
"""

import json

import pytest

from hisparse_model import Knobs, plan, predict, simulate
from hisparse_model.kv_pool import request_blocks, warmup_request_cap, worker_groups
from hisparse_model.recordings import recorded_dir
from hisparse_model.workload import Workload

# (K, max_model_len, smallest pool vLLM 0.31.0's planner admits): found by bisecting
# num_gpu_blocks_override over vLLM's own get_kv_cache_configs on CPU (scheduler_build).
#   K=0: 9 groups of cdiv(L, 64) (indexer + 8 resident) + 8 hot x cdiv(2*128, 64)=4 + null block
#   K=1: 10 x cdiv(L, 64) + 9 hot x cdiv(3*128, 64)=6 + 1;  K=2: 10 x cdiv + 9 x 8 + 1
ADMITTED = [
    (0, 1, 42),      # 9*1 + 32 + 1
    (0, 64, 42),     # 9*1 + 32 + 1
    (0, 65, 51),     # 9*2 + 32 + 1
    (0, 320, 78),    # 9*5 + 32 + 1
    (0, 1000, 177),  # 9*16 + 32 + 1
    (0, 4096, 609),  # 9*64 + 32 + 1
    (1, 64, 65),     # 10*1 + 54 + 1
    (1, 320, 105),   # 10*5 + 54 + 1
    (1, 4096, 695),  # 10*64 + 54 + 1
    (2, 320, 123),   # 10*5 + 72 + 1
    (2, 1000, 233),  # 10*16 + 72 + 1
]


@pytest.mark.parametrize("k,length,smallest", ADMITTED)
def test_admission_threshold(k, length, smallest):
    """A pool one block short of vLLM's threshold is refused, naming the knob; the threshold starts."""
    assert request_blocks(length, k) + 1 == smallest
    kn = Knobs(max_num_seqs=2, max_model_len=length, num_speculative_tokens=k,
               max_num_batched_tokens=max(length, 2 * (k + 2)))
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
    assert rec["engine"]["kv_cache_groups"] == worker_groups(0) == 18
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
