"""Where every number on a notebook screen comes from: formula and vLLM file:line.

The notebooks never state a size without the rule that makes it and the vLLM
line that implements it.  This module keeps those citations in one table
(:data:`CITES`, per vLLM version, paths relative to the ``vllm/`` package of
the released wheel) and renders them as short text or HTML for the widgets.

The line numbers are the ones the model modules cite (``sizes.py``,
``routing.py``, ``scheduler_defaults.py``, ``capture_sizes.py``); this module
adds no rule of its own, it only formats the model's numbers.
"""

from __future__ import annotations

import html

# name -> version -> "path:lines `symbol`"
CITES: dict[str, dict[str, str]] = {
    "q": {  # max_decode_query_len: 1 + num_speculative_tokens (V2 runner)
        "0.31.0": "vllm/v1/attention/backend.py:579-596 `max_decode_query_len`",
        "0.32.0": "vllm/v1/attention/backend.py:569-586 `max_decode_query_len`",
        "0.33.0": "vllm/v1/attention/backend.py:572-589 `max_decode_query_len`",
    },
    "B": {  # default max_num_batched_tokens = min(S * max_model_len, 16384)
        "0.31.0": "vllm/engine/arg_utils.py:3102-3105 (clamp in "
        "`_set_default_max_num_seqs_and_batched_tokens_args`)",
        "0.32.0": "vllm/engine/arg_utils.py:3167-3170 (clamp in "
        "`_set_default_max_num_seqs_and_batched_tokens_args`)",
        "0.33.0": "vllm/engine/arg_utils.py:3221-3224 (clamp in "
        "`_set_default_max_num_seqs_and_batched_tokens_args`)",
    },
    "C": {  # swap capacity, rows swap_in may use: min(B, S * q)
        "0.31.0": "vllm/v1/hisparse/runtime.py:51-57 `_get_max_swap_rows`",
        "0.32.0": "vllm/v1/hisparse/runtime.py:53-59 `_get_max_swap_rows`",
        "0.33.0": "vllm/v1/hisparse/runtime.py:56-62 `_get_max_swap_rows`",
    },
    "W": {  # index-group workspace rows: C + 1
        "0.31.0": "vllm/v1/attention/backends/mla/index_group.py:365-376 `workspace_rows + 1`",
        "0.32.0": "vllm/v1/attention/backends/mla/index_group.py:371-382 `workspace_rows + 1`",
        "0.33.0": "vllm/v1/attention/backends/mla/index_group.py:378-389 `workspace_rows + 1`",
    },
    "predicate": {  # convert_logical_to_physical_topk: swap_in or all-resident
        "0.31.0": "vllm/v1/attention/backends/mla/index_group.py:236 "
        "`num_tokens > self.physical_topk_indices.shape[0]`",
        "0.32.0": "vllm/v1/attention/backends/mla/index_group.py:236 "
        "`num_tokens > cache.runtime.max_swap_rows`",
        "0.33.0": "vllm/v1/attention/backends/mla/index_group.py:239-242 "
        "`num_tokens > cache.runtime.max_swap_rows or (all resident and has prefill)`",
    },
    "error": {  # the ValueError swap_in raises past C rows
        "0.31.0": "vllm/v1/hisparse/runtime.py:897-907 `_step_rows`",
        "0.32.0": "vllm/v1/hisparse/runtime.py:909-919 `_step_rows`",
        "0.33.0": "vllm/v1/hisparse/runtime.py:930-940 `_step_rows`",
    },
    "capture_sizes": {  # default CUDA-graph capture sizes
        "0.31.0": "vllm/config/vllm.py:2388-2656 `_set_cudagraph_sizes`",
        "0.32.0": "vllm/config/vllm.py:2292-2550 `_set_cudagraph_sizes`",
        "0.33.0": "vllm/config/vllm.py:2398-2656 `_set_cudagraph_sizes`",
    },
    "handoff": {  # which tokens of a batch an attention backend routes
        "0.31.0": "vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:204-260, "
        "flashmla_sparse.py:815-850",
        "0.32.0": "vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:208-275, "
        "flashmla_sparse.py:855-890",
        "0.33.0": "vllm/model_executor/layers/attention/sparse_mla_attention.py:805-812, "
        "flashmla_sparse.py:855-870",
    },
    "startup": {  # the V2 worker's start-up sequence
        "0.31.0": "vllm/v1/worker/gpu_worker.py:571-660, 829-890 "
        "(profile, compile warmup, warmup_kernels, capture_model)",
        "0.32.0": "vllm/v1/worker/gpu_worker.py (same sequence as 0.31.0)",
        "0.33.0": "vllm/v1/worker/gpu_worker.py (same sequence as 0.31.0)",
    },
}

PREDICATE = {
    "0.31.0": "swap_in if n <= W = C + 1, else all-resident",
    "0.32.0": "swap_in if n <= C, else all-resident",
    "0.33.0": "swap_in if n <= C and the batch is decode-only (or not all resident), "
    "else all-resident",
}
FIX_PREDICATE = "swap_in if n <= C, else all-resident (the upstream fix on 0.31.0)"


def cite(name: str, version: str = "0.31.0") -> str:
    """``path:lines `symbol``` of ``name`` in ``version``."""
    return CITES[name][version]


def predicate(version: str, routing: str = "stock") -> str:
    """The routing rule of ``convert_logical_to_physical_topk`` in words."""
    if routing == "fix":
        return FIX_PREDICATE
    return PREDICATE[version]


def formulas(pred) -> list[tuple[str, str, str]]:
    """``(name, "formula = value", citation)`` for B, q, C and W of a prediction."""
    k, s = pred.knobs, pred.sizes
    v = k.vllm_version
    if k.max_num_batched_tokens is None:
        b = (  # max_num_batched_tokens not set: vLLM's default for the LLM class on an H200
            f"B = min(max_num_seqs * max_model_len, 16384) = min({k.max_num_seqs} * "
            f"{k.max_model_len}, 16384) = {s.max_num_batched_tokens} (default)"
        )
    else:
        b = f"B = max_num_batched_tokens = {s.max_num_batched_tokens} (set)"
    if k.num_speculative_tokens:
        q = f"q = 1 + num_speculative_tokens = 1 + {k.num_speculative_tokens} = {s.max_decode_query_len}"
    else:
        q = f"q = 1 (no speculative decoding) = {s.max_decode_query_len}"
    c = (
        f"C = min(B, max_num_seqs * q) = min({s.max_num_batched_tokens}, "
        f"{k.max_num_seqs} * {s.max_decode_query_len}) = {s.swap_capacity}"
    )
    w = f"W = C + 1 = {s.swap_capacity} + 1 = {s.workspace_rows}"
    return [
        ("B", b, cite("B", v)),
        ("q", q, cite("q", v)),
        ("C", c, cite("C", v)),
        ("W", w, cite("W", v)),
    ]


def to_html(text: str) -> str:
    """Escape ``text`` for HTML and show its `backticked` parts as code."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def cite_html(name: str, version: str = "0.31.0") -> str:
    return f"<span class='hs-cite' style='color:#555'>{to_html(cite(name, version))}</span>"


def formulas_html(pred) -> str:
    """:func:`formulas` as an HTML table (formula, vLLM line)."""
    rows = "".join(
        f"<tr><td style='padding-right:12px'><code>{html.escape(f)}</code></td>"
        f"<td style='color:#555'>{to_html(c)}</td></tr>"
        for _, f, c in formulas(pred)
    )
    return f"<table class='hs-formulas'>{rows}</table>"


def batch_line(b) -> str:
    """One batch as a plain-text line: phase, label, tokens, routed n, route, error."""
    routed = f"routed n={b.routed:<4} -> {b.route}" if b.routed else "not routed"
    err = f"   !! {b.error}" if b.error else ""
    return (f"{b.phase:<25} {b.label:<18} [{b.cudagraph_mode:<9}] {b.num_tokens:>5} tokens "
            f"in {b.num_reqs:>3} req, {b.num_decode_tokens:>4} decode   {routed}{err}")


def startup_text(pred, *, routed_only: bool = False) -> str:
    """The start-up batches of a prediction in engine order, one line each."""
    lines = [f"capture sizes {pred.capture_sizes} (cudagraph_mode {pred.cudagraph_mode})"]
    for b in pred.startup:
        if routed_only and not b.routed:
            continue
        lines.append("  " + batch_line(b))
        if b.error:
            lines.append("  ... the engine stops here: start-up fails")
            break
    if pred.startup_ok:
        lines.append("  start-up ok")
    return "\n".join(lines)


def prompts_text(pred) -> str:
    """Each prompt's batches and outcome (served alone, as the fix PR's loop does)."""
    lines = []
    for p in pred.prompts:
        lines.append(f"prompt of {p.n} tokens: {'ok' if p.ok else p.error}")
        lines += ["  " + batch_line(b) for b in p.batches]
    return "\n".join(lines)


def routes_text(capacity: int, ns, lanes) -> str:
    """How each lane's routing rule treats a few routed-token counts n."""
    from . import routing

    lines = []
    for n in ns:
        cells = []
        for label, (version, mode) in lanes.items():
            r = routing.route(version, mode, n, capacity, has_prefill=True)
            cells.append(f"{label}: {r.path}{' -> ' + r.error if r.error else ''}")
        lines.append(f"n={n:<4} " + " | ".join(cells))
    return "\n".join(lines)
