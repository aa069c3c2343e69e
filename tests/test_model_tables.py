"""Table-driven checks of the model's sizes, routing and outcomes, arithmetic in comments.

Expected values are computed by hand from vLLM's formulas (cited in the
modules), not copied from the model's output.
"""

import pytest

from hisparse_model import Knobs, predict, plan

from hisparse_model.model import routing
from hisparse_model.model.versions import RULES

ERR = routing.ERROR_TEMPLATE

SIZE_CASES = [
    # S, B,    K, max_model_len -> B_resolved, q, C, W
    # B default on an H200 (LLM class): min(16384, S * max_model_len)
    (1, None, 0, 320, 320, 1, 1, 2),  # B = min(16384, 1*320) = 320; C = min(320, 1*1) = 1
    (2, None, 0, 320, 640, 1, 2, 3),  # B = 2*320 = 640 (the live 0.31.0 run's value); C = 2
    (3, None, 0, 320, 960, 1, 3, 4),  # B = 960; C = min(960, 3) = 3; W = 4
    (256, None, 0, 320, 16384, 1, 256, 257),  # B = min(16384, 81920); C = 256
    (2, 64, 0, 320, 64, 1, 2, 3),  # explicit B; C = min(64, 2) = 2
    (2, None, 1, 320, 640, 2, 4, 5),  # MTP K=1: q = 1 + 1 = 2; C = min(640, 2*2) = 4
    (1, None, 2, 320, 320, 3, 3, 4),  # K=2: q = 3; C = min(320, 1*3) = 3
    (4, 6, 3, 320, 6, 4, 6, 7),  # K=3: q = 4; S*q = 16 > B = 6 -> C = B = 6 (B-limited)
]


@pytest.mark.parametrize("s,b,k,mml,b_res,q,c,w", SIZE_CASES)
def test_sizes(s, b, k, mml, b_res, q, c, w):
    """C = min(B, S*q) and the workspace is always exactly one row larger (W = C + 1)."""
    got = plan(Knobs(max_num_seqs=s, max_num_batched_tokens=b, num_speculative_tokens=k,
                     max_model_len=mml))
    assert (got.max_num_batched_tokens, got.max_decode_query_len) == (b_res, q)
    assert (got.swap_capacity, got.workspace_rows) == (c, w)


def test_parallel_drafting_is_rejected_under_hisparse():
    """HiSparse forces the V2 runner, which refuses parallel drafting (vllm/config/vllm.py:3088-3091)."""
    with pytest.raises(ValueError, match="^parallel_drafting: Model Runner V2 does not yet support"):
        plan(Knobs(max_num_seqs=2, num_speculative_tokens=2, parallel_drafting=True))


FA, FM = "FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"

ROUTE_CASES = [
    # rules, backend, n tokens, of them decode, C, all pages resident -> routed, path, error
    # One request of n tokens, all resident: a pure prefill (0 decode tokens) or n decodes.
    ("0.31.0", FA, 2, 0, 2, True, 2, "swap_in", None),  # n = C fits the swap rows
    ("0.31.0", FA, 3, 0, 2, True, 3, "swap_in", ERR.format(stop=3, capacity=2)),  # n = W = C+1
    ("0.31.0", FA, 4, 0, 2, True, 4, "all_resident", None),  # n > W
    ("0.31.0+fix", FA, 3, 0, 2, True, 3, "all_resident", None),  # fix: n > C -> fallback
    ("0.32.0", FA, 3, 0, 2, True, 3, "all_resident", None),
    ("0.32.0", FA, 2, 0, 2, True, 2, "swap_in", None),
    ("0.33.0", FA, 2, 0, 2, True, 2, "all_resident", None),  # any resident prefill -> all-resident
    ("0.33.0", FA, 2, 2, 2, True, 2, "swap_in", None),  # decode-only, n <= C
    ("0.31.0", FA, 17, 0, 16, True, 17, "swap_in", ERR.format(stop=17, capacity=16)),
    # The hand-off (which tokens reach convert_logical_to_physical_topk at all):
    # 0.31.0/0.32.0 FLASH_ATTN_MLA_SPARSE (flashattn_mla_sparse.py:204-260): the decode part
    # first; the rest only when the batch has no decode token and is all resident.
    ("0.31.0", FA, 10, 3, 4, True, 3, "swap_in", None),  # mixed: only the 3 decodes route
    ("0.32.0", FA, 10, 3, 4, True, 3, "swap_in", None),
    ("0.31.0", FA, 5, 0, 4, False, 0, None, None),  # prefill, not resident: staged, not routed
    ("0.31.0", FA, 4, 4, 4, False, 4, "swap_in", None),  # decode-only: the whole batch
    # FLASHMLA_SPARSE (flashmla_sparse.py:815-850): the decode part only, never a prefill.
    ("0.31.0", FM, 3, 0, 2, True, 0, None, None),
    ("0.31.0", FM, 10, 3, 4, True, 3, "swap_in", None),
    # 0.33.0 (sparse_mla_attention.py:805-812): the whole batch when it is decode-only or all
    # resident, else the decode part; not resident, swap_in takes n <= C, prefill or not.
    ("0.33.0", FA, 10, 3, 4, True, 10, "all_resident", None),  # resident mixed: whole batch
    ("0.33.0", FA, 10, 3, 4, False, 3, "swap_in", None),  # not resident mixed: 3 decodes
    ("0.33.0", FA, 10, 0, 4, False, 0, None, None),  # not resident prefill: not routed
    ("0.33.0", FA, 4, 4, 4, False, 4, "swap_in", None),  # decode-only, n = C
    ("0.33.0", FM, 10, 3, 4, True, 10, "all_resident", None),  # every backend in 0.33.0
    ("0.33.0", FM, 10, 3, 4, False, 3, "swap_in", None),
]


@pytest.mark.parametrize("key,backend,n,dec,c,resident,routed,path,err", ROUTE_CASES)
def test_route(key, backend, n, dec, c, resident, routed, path, err):
    """0.31.0 sends up to C+1 routed tokens to swap_in, which overflows at C+1; the others route on C."""
    got = RULES[key].router(backend, c, resident)(n, dec)
    assert got == (routed, path, err)


OUTCOME_CASES = [
    # knobs, prompts -> startup error (None = ok), per-prompt error
    # The fix PR's two cases: S=1 crashes at start on the 2-token PIECEWISE capture
    # (capture sizes [1, 2]; 2 tokens over min(2, 1) = 1 request = a prefill = C+1).
    (dict(max_num_seqs=1), [2, 3, 200], ERR.format(stop=2, capacity=1), [ERR.format(stop=2, capacity=1), None, None]),
    # S=2: captures [1, 2, 4] never route 3 tokens; the 3-token prompt does (C+1 = 3).
    (dict(max_num_seqs=2), [2, 3, 200], None, [None, ERR.format(stop=3, capacity=2), None]),
    # S=3: C+1 = 4 is a capture size but 4 tokens over 3 requests = (1, 1, 2): only
    # the 2 decode tokens are routed; the warmup prefill is 3 * 2 = 6 > 4.
    (dict(max_num_seqs=3), [3, 200, 4], None, [None, None, ERR.format(stop=4, capacity=3)]),
    # S=3, B=4: warmup prefill R = min(3, 4 // 2) = 2 requests of 2 tokens = 4 = C+1.
    (dict(max_num_seqs=3, max_num_batched_tokens=4), [3], ERR.format(stop=4, capacity=3), [None]),
    # enforce_eager: no captures and no JIT warmup -> S=1 starts, then a 2-token prompt crashes.
    (dict(max_num_seqs=1, enforce_eager=True), [2], None, [ERR.format(stop=2, capacity=1)]),
    # B=64: a 67-token prompt is chunked 64 + 3; the last chunk is C+1 = 3.
    (dict(max_num_seqs=2, max_num_batched_tokens=64), [130, 67], None, [None, ERR.format(stop=3, capacity=2)]),
    # B = S = 4: no step exceeds B = C, so nothing can reach C+1.
    (dict(max_num_seqs=4, max_num_batched_tokens=4), [4, 5, 200], None, [None, None, None]),
    # FLASHMLA_SPARSE never hands prefill tokens to the routing.
    (dict(max_num_seqs=1, attention_backend="FLASHMLA_SPARSE"), [2, 3], None, [None, None]),
    # The fix and 0.32.0/0.33.0 never crash on the PR's cases.
    (dict(max_num_seqs=1, routing="fix"), [2, 3, 200], None, [None, None, None]),
    (dict(max_num_seqs=1, vllm_version="0.32.0"), [2, 3, 200], None, [None, None, None]),
    (dict(max_num_seqs=2, vllm_version="0.33.0"), [2, 3, 200], None, [None, None, None]),
    # MTP K=2, S=1: q = 3, C = 3; capture sizes [1, 2, 3, 4]: 4 tokens over 1 request = C+1.
    (dict(max_num_seqs=1, num_speculative_tokens=2), [2], ERR.format(stop=4, capacity=3), [None]),
    # MTP K=1, S=2: q = 2, C = 4; a 2-token prompt is a decode; 5 tokens = C+1.
    (dict(max_num_seqs=2, num_speculative_tokens=1), [2, 5], None, [None, ERR.format(stop=5, capacity=4)]),
]


@pytest.mark.parametrize("kw,prompts,startup_err,prompt_errs", OUTCOME_CASES)
def test_outcomes(kw, prompts, startup_err, prompt_errs):
    """Start-up and per-prompt outcomes follow from which batches reach the routing with C+1 tokens."""
    pred = predict(Knobs(**kw), prompts)
    assert pred.startup_error == startup_err
    assert [p.error for p in pred.prompts] == prompt_errs


def test_startup_crash_phase_for_pr_case():
    """max_num_seqs=1 dies in the first (memory-profiling) PIECEWISE capture, on 2 tokens."""
    bad = predict(Knobs(max_num_seqs=1)).startup_crash_batch
    assert (bad.phase, bad.cudagraph_mode, bad.num_tokens, bad.num_reqs) == (
        "cudagraph_memory_profile", "PIECEWISE", 2, 1)


DRAFT_STEP_CASES = [
    # MTP K = 3, S = 2: capture sizes 1, 2, 4, 8, 16 (grid up to min(640, 2*2*4) = 16); the
    # drafter's K - 1 = 2 one-token draft steps get a FULL graph per size <= S: 2, then 1.
    # version, backend -> forwards of each draft-step capture
    ("0.31.0", FA, 2),  # a graph per draft step: its eager pass + its capture pass
    ("0.32.0", FA, 4),  # the 2 draft steps share one graph, run in both passes: 2 x 2
    ("0.33.0", FA, 4),
    ("0.32.0", FM, 2),  # FLASHMLA_SPARSE does not share it
]


@pytest.mark.parametrize("version,backend,forwards", DRAFT_STEP_CASES)
def test_mtp_draft_step_captures(version, backend, forwards):
    """The drafter's draft-step graphs (sizes <= S) run 2 forwards, or 2 (K - 1) where 0.32.0+ fuses them."""
    pred = predict(Knobs(vllm_version=version, max_num_seqs=2, num_speculative_tokens=3,
                         attention_backend=backend), [])
    got = [(b.num_tokens, b.forwards) for b in pred.startup
           if b.phase == "capture" and b.label == "FULL capture (MTP draft step)"]
    assert got == [(2, forwards), (1, forwards)]
