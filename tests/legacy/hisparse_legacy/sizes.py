"""The three HiSparse sizes the fix PR is about: q, C and the workspace rows W = C + 1.

All sizes are in *rows*; one row holds the top-k indices of one query token.

``max_decode_query_len`` (q), tokens per decode request
    ``v1/attention/backend.py:579-596`` (0.31.0) / ``569-586`` (0.32.0) /
    ``572-589`` (0.33.0): 1 without speculative decoding, else
    1 + num_speculative_tokens; the extra ``+ num_speculative_tokens`` for
    ``parallel_drafting`` applies to the V1 model runner only, and HiSparse
    forces V2 (``config/vllm.py:701-710`` in 0.31.0), so it never applies here.

swap capacity C, rows ``swap_in`` may use in one forward
    ``v1/hisparse/runtime.py:51-57`` (0.31.0) / ``53-59`` (0.32.0) /
    ``56-62`` (0.33.0), ``_get_max_swap_rows``: min(B, S * q).  It sizes the
    shared top-k rows (``HiSparseIndexGroup.shared_topk``, runtime.py:664 in
    0.31.0) that ``_step_rows`` (runtime.py:897-907) checks.

index-group workspace W, rows of ``physical_topk_indices``
    ``get_sparse_mla_index_group_max_rows`` gives the same min(B, S * q)
    (``v1/attention/backends/mla/index_group.py:393-398`` / ``399-404`` /
    ``406-411``), and the builder allocates it with one spare row,
    ``workspace_rows + 1`` (index_group.py:365-376 / 371-382 / 378-389).
    0.31.0 routes on W, so a batch of exactly W = C + 1 tokens reaches swap_in.
"""

from __future__ import annotations

from dataclasses import dataclass

from .knobs import Knobs
from .scheduler_defaults import resolved_max_num_batched_tokens


def max_decode_query_len(knobs: Knobs) -> int:
    """q: tokens per decode request (verification request under MTP)."""
    if knobs.num_speculative_tokens == 0:
        return 1  # one new token per decode step
    # 1 sampled token + num_speculative_tokens draft tokens to verify; the
    # parallel-drafting widening is V1-runner only and HiSparse forces V2.
    return 1 + knobs.num_speculative_tokens


@dataclass(frozen=True)
class Sizes:
    max_num_batched_tokens: int  # B, tokens per engine step
    max_decode_query_len: int  # q, tokens per decode request
    swap_capacity: int  # C = min(B, S * q), rows
    workspace_rows: int  # W = C + 1, rows

    @property
    def crash_size(self) -> int:
        """The one batch size 0.31.0 sends to swap_in although it exceeds C."""
        return self.workspace_rows


def sizes(knobs: Knobs) -> Sizes:
    b = resolved_max_num_batched_tokens(knobs)  # tokens per step
    q = max_decode_query_len(knobs)  # tokens per decode request
    c = min(b, knobs.max_num_seqs * q)  # rows: requests * tokens per request, capped by B
    return Sizes(
        max_num_batched_tokens=b,
        max_decode_query_len=q,
        swap_capacity=c,
        workspace_rows=c + 1,  # one spare row (index_group.py:367, 0.31.0)
    )
