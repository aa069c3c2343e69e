"""CUDA-graph capture descriptors: which dummy batches the capture runs.

``CudaGraphManager._init_candidates`` (``v1/worker/gpu/cudagraph_utils.py:249-386``
in 0.31.0, ``251-...`` in 0.32.0, ``256-...`` in 0.33.0) turns the capture sizes
into descriptors:

* mixed mode (PIECEWISE, or FULL when cudagraph_mode is FULL): one descriptor
  per capture size T; a PIECEWISE one leaves ``num_reqs`` unset, so the dummy
  batch spreads T tokens over min(T, max_num_seqs) requests (line 650); a FULL
  mixed one sets ``num_reqs = min(T, max_num_seqs)``.
* decode mode FULL with a separate decode routine (FULL_AND_PIECEWISE,
  FULL_DECODE_ONLY): per capture size T, a uniform decode graph of
  round_up(T, q) tokens in round_up(T, q) / q requests of q tokens, kept only if
  it fits max_num_seqs * q, the largest capture size and max_num_seqs requests
  (lines 322-346); duplicates dropped.

Both lists are captured largest first (lines 376-378), PIECEWISE before FULL
(line 420).
"""

from __future__ import annotations

from .capture_sizes import compile_warmup_sizes as _compile_warmup_sizes

Descriptor = tuple  # (num_tokens, num_reqs or None, uniform query length or None)

MIXED_MODE = {
    "FULL_AND_PIECEWISE": "PIECEWISE",
    "PIECEWISE": "PIECEWISE",
    "FULL": "FULL",
    "FULL_DECODE_ONLY": None,
    "NONE": None,
}
DECODE_FULL = {"FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"}


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def capture_descriptors(ctx) -> tuple[list[Descriptor], list[Descriptor]]:
    """(PIECEWISE-mode descriptors, FULL-mode descriptors), each largest first."""
    mode = ctx.cudagraph_mode
    sizes = sorted(ctx.capture_sizes)
    if mode == "NONE" or not sizes:
        return [], []
    s = ctx.knobs.max_num_seqs
    q = ctx.sizes.max_decode_query_len
    max_decode_tokens = s * q  # requests * tokens per decode request
    max_capture = max(sizes)
    piecewise: list[Descriptor] = []
    full: list[Descriptor] = []
    for t in sizes:
        if mode in DECODE_FULL:
            rounded = _round_up(t, q)  # tokens, whole decode requests
            reqs = rounded // q
            if rounded <= max_decode_tokens and rounded <= max_capture and reqs <= s:
                desc = (rounded, reqs, q)
                if desc not in full:
                    full.append(desc)
        mixed = MIXED_MODE[mode]
        if mixed == "PIECEWISE":
            piecewise.append((t, None, None))
        elif mixed == "FULL":
            full.append((t, min(t, s), None))
    piecewise.sort(key=lambda d: d[0], reverse=True)
    full.sort(key=lambda d: d[0], reverse=True)
    return piecewise, full


def compile_warmup_sizes(ctx) -> list[int]:
    """Extra ``_dummy_run`` sizes of ``compile_or_warm_up_model``, largest first."""
    return sorted(_compile_warmup_sizes(ctx), reverse=True)
