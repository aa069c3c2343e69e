"""Vectorised sweep: sizes and 0.31.0 outcomes for many configurations at once (numpy).

:func:`predict` walks every batch of one configuration; a sweep over 100,000
configurations needs the same answers as array arithmetic.  The closed forms
below follow from the batch walk (and are tested equal to it,
``tests/test_sweep.py``), for the default engine shape: FLASH_ATTN_MLA_SPARSE,
cudagraph_mode FULL_AND_PIECEWISE (or eager), stock routing, the KV pool memory
profiling leaves (no num_gpu_blocks_override).

* C = min(B, S·q), W = C + 1 (``plan.py``).
* Start-up crash (0.31.0) iff
  - W is a capture size whose dummy batch is prefill-only: W tokens over
    min(W, S) requests with W // min(W, S) > q tokens each (a mixed or decode
    batch hands only its decode tokens, at most C, to the routing); or
  - the JIT warmup prefill, R = min(S, B // (q + 1)) requests of q + 1 tokens,
    has exactly W tokens (not under enforce_eager).
* A prompt of n tokens crashes (0.31.0) iff a prefill chunk has W tokens; the
  smallest such prompt is W itself when W <= B, and none when W > B (C = B).
"""

from __future__ import annotations

import numpy as np

from ..model.plan import PLATFORM_MAX_CAPTURE  # tokens: largest default CUDA graph on SM90


def _request_count_grid(n: np.ndarray) -> np.ndarray:
    """Whether n requests is on the spec-decode request grid (1, 2, 4, 8k<256, 16k>=256)."""
    return (
        np.isin(n, (1, 2, 4))
        | ((n >= 8) & (n < 256) & (n % 8 == 0))
        | ((n >= 256) & (n % 16 == 0))
    )


def is_capture_size(x, s, b, q) -> np.ndarray:
    """Whether token count x is among the default capture sizes (plan.capture_sizes)."""
    x, s, b, q = np.broadcast_arrays(*(np.asarray(v, dtype=np.int64) for v in (x, s, b, q)))
    cap0 = np.minimum(s * q * 2, PLATFORM_MAX_CAPTURE)  # tokens: 2 decode steps' worth
    cap = np.minimum(b, cap0)  # tokens, capped by B
    grid = (
        np.isin(x, (1, 2, 4))
        | ((x >= 8) & (x < 256) & (x % 8 == 0))
        | ((x >= 256) & (x % 16 == 0))
    ) & (x <= cap)
    full_batch = (x == b) & (b <= cap)  # B itself when it fits under the cap
    # uniform-decode sizes: S (q == 1) or n*q for n on the request grid (q > 1)
    n = x // q
    max_reqs = np.minimum(s, PLATFORM_MAX_CAPTURE)
    on_grid = (x % q == 0) & (n >= 1) & (
        (_request_count_grid(n) & (n <= max_reqs)) | (n == max_reqs)
    )
    uniform = np.where(q == 1, (x == s) & (s <= cap0), on_grid & (x <= cap0)) & (x <= b)
    return grid | full_batch | uniform


def sweep(max_num_seqs, max_num_batched_tokens, num_speculative_tokens=0, enforce_eager=False):
    """Arrays of C, W, start-up crash (0.31.0) and smallest crashing prompt (0: none)."""
    s = np.asarray(max_num_seqs, dtype=np.int64)
    b = np.asarray(max_num_batched_tokens, dtype=np.int64)
    k = np.asarray(num_speculative_tokens, dtype=np.int64)
    s, b, k = np.broadcast_arrays(s, b, k)
    eager = np.broadcast_to(np.asarray(enforce_eager, dtype=bool), s.shape)
    q = 1 + k  # tokens per decode request
    c = np.minimum(b, s * q)  # swap rows
    w = c + 1  # workspace rows
    per_req = w // np.minimum(w, s)  # tokens per dummy request when W is captured
    capture_crash = ~eager & is_capture_size(w, s, b, q) & (per_req > q)
    warm_reqs = np.minimum(s, b // (q + 1))  # JIT warmup prefill requests
    warmup_crash = ~eager & (warm_reqs >= 1) & (warm_reqs * (q + 1) == w)
    first_bad_prompt = np.where(w <= b, w, 0)
    return {
        "swap_capacity": c,
        "workspace_rows": w,
        "startup_crash": capture_crash | warmup_crash,
        "first_crashing_prompt": first_bad_prompt,
    }
