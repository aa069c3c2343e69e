"""The words a refusal uses that a learner may not know, each defined once.

:func:`defined` gives the definitions of those a message uses, for the dashboards to show
under it (notebook 7's host-pool refusal: host blocks, the null block, a copy-on-write tail).
docs/host-pool.md says the same in prose.
"""

from __future__ import annotations

TERMS = {
    "host block": "64 tokens of one request's KV cache in the HiSparse host pool (host memory); "
                  "a pool of host_pool_gib holds int(host_pool_gib x 2^30) // the block's bytes "
                  "of them, a block being 64 tokens x every sparse layer's row (the fix PR's "
                  "tiny model: 589,824 bytes; DeepSeek-V3.2: 4,497,408 in bf16, 2,561,024 in "
                  "fp8_ds_mla; the answer names its model's)",
    "null block": "the one block vLLM keeps aside and never gives a request, so a pool of N "
                  "blocks serves N - 1",
    "copy-on-write tail": "one block more per request that the model counts (vLLM's start-up "
                          "check counts it once) for a last block written again",
}


def defined(message: str) -> list[tuple[str, str]]:
    """``[(term, definition), ...]`` of the terms ``message`` uses, in :data:`TERMS`' order."""
    low = message.lower()
    return [(term, text) for term, text in TERMS.items() if term in low]
