"""vLLM 0.34.0's KV-cache sizing warmup and sampler warmup, batch by batch (sizing_warmup.py).

Invariant: each step of the two warmups has the tokens, requests and decode tokens that
vLLM 0.34.0's own code gives it (``run_kv_cache_sizing_warmup`` and ``_dummy_run`` driven on
the CPU by ``crosscheck/startup_driver.py``, which printed every row below; the first row is
also the H200 recording ``v0.34.0-stock-s2``), and the route that follows from them.

The arithmetic is in the comments: q = 1 + K tokens per decode request, a prefill holds at
most max_model_len - 1 tokens, the runner puts a request with drafts first, then requests of
exactly q tokens, then the rest by length (``sort_batch_req_ids``), and a batch with a prefill
goes all-resident in 0.34.0.
"""

import pytest

from hisparse_model.model.knobs import Knobs
from hisparse_model.answers.predict import predict


def _rows(knobs: Knobs, phase: str) -> list[tuple]:
    return [(b.runner, b.num_tokens, b.num_reqs, b.num_decode_tokens, b.route)
            for b in predict(knobs).startup if b.phase == phase and b.label != "MTP draft steps"]


K34 = dict(vllm_version="0.34.0", max_model_len=320)


@pytest.mark.parametrize("knobs, want", [
    # S 2, B 640 (2 x 320), L 320: a prompt-logprobs step of min(B, L) = 320 tokens: its decode
    # request first runs its 2-token prompt, then 1 decode + 319 prefill; the full budget needs
    # ceil(639 / 319) = 3 prefills, more than the free slot, so no decode: 2 x 319 = 638; the
    # context step: min(ceil(2560 / 317), S) = 2 requests of q + 1 = 2 tokens
    (Knobs(**K34, max_num_seqs=2),
     [("target", 2, 1, 0, "all_resident"), ("target", 320, 2, 1, "all_resident"),
      ("target", 638, 2, 0, "all_resident"), ("target", 4, 2, 0, "all_resident")]),
    # S 29, K 3 (q 4), L 2048, B 16384, FULL_DECODE_ONLY: the logprobs step 2048 = 4 + 2044;
    # the full budget: 4 + 9 prefills (8 x 2047 = 16376, the remainder 16384 - 4 - 16376 = 4),
    # the remainder of q = 4 tokens sorted right after the decode request: 4 + 4 = 8 decode
    # tokens (vLLM's own split; the model counted 4 before 2026-12-04); the context step:
    # min(ceil(16384 / 2043), 29) = 9 requests of q + 1 = 5
    (Knobs(vllm_version="0.34.0", max_model_len=2048, max_num_seqs=29, num_speculative_tokens=3,
           cudagraph_mode="FULL_DECODE_ONLY"),
     [("both", 2, 1, 2, "swap_in"), ("both", 2048, 2, 4, "all_resident"),
      ("both", 2, 1, 2, "swap_in"), ("both", 16384, 10, 8, "all_resident"),
      ("both", 45, 9, 0, "all_resident")]),
])
def test_sizing_warmup_steps_are_vllms(knobs, want):
    assert _rows(knobs, "kv_cache_sizing_warmup") == want


@pytest.mark.parametrize("backend, want", [
    # S 46, K 1 (q 2), B 512, PIECEWISE: min(S, B) = 46 one-token requests, padded to the
    # PIECEWISE graph of 48 tokens; the dummy batch spreads 48 over 46 requests: 44 of 1 token,
    # the last 2 of 2.  FLASHMLA_SPARSE splits uniformly: only the leading 44 one-token
    # requests decode, the 2-token ones are prefills, so the batch goes all-resident
    ("FLASHMLA_SPARSE", [("both", 48, 46, 44, "all_resident")]),
    # FLASH_ATTN_MLA_SPARSE: every request of at most q = 2 tokens decodes: 48 <= C = 92
    ("FLASH_ATTN_MLA_SPARSE", [("both", 48, 46, 48, "swap_in")]),
])
def test_sampler_warmup_splits_the_padded_dummy_batch_as_vllm(backend, want):
    knobs = Knobs(vllm_version="0.34.0", max_model_len=2048, max_num_seqs=46,
                  max_num_batched_tokens=512, num_speculative_tokens=1,
                  cudagraph_mode="PIECEWISE", attention_backend=backend)
    assert _rows(knobs, "sampler_warmup") == want
