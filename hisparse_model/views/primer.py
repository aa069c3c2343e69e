"""Notebook 1's primer: where in vLLM each rule lives.

:func:`where_in_vllm` is a collapsible table of every rule the model follows,
read from :attr:`VersionRules.cites <hisparse_model.model.versions.VersionRules.cites>`.
The buffers' picture, for any knobs, is :mod:`hisparse_model.views.buffers`'.
"""

from __future__ import annotations

from ..model.versions import RULES
from .tables import cite_html, esc, table

# What each cited rule is, in words (every name in VersionRules.cites has one).
MEANING = {
    "B": "B: the default max_num_batched_tokens, min(S · max_model_len, 16384)",
    "B>=S": "vLLM refuses max_num_batched_tokens < max_num_seqs",
    "q": "q: tokens of one decode request, 1 + num_speculative_tokens",
    "C": "C: the swap rows, min(B, S · q)",
    "max_rows": "the index group's decode rows, C",
    "W": "W: the index-group workspace, C + 1 rows",
    "predicate": "the routing check: swap_in or the all-resident path",
    "error": "the ValueError swap_in raises past C rows",
    "handoff": "which tokens FLASH_ATTN_MLA_SPARSE hands to the routing",
    "handoff_flashmla": "which tokens FLASHMLA_SPARSE hands to the routing",
    "spec_slots": "vLLM's check that B leaves room for speculative tokens",
    "capture_sizes": "the default CUDA-graph capture sizes",
    "memory_profile": "start-up 1: memory profiling, which captures CUDA graphs",
    "startup": "start-up 2: JIT warmup, then CUDA-graph capture",
    "warmup": "the JIT warmup: one prefill, then decode steps",
    "dispatch": "serving: FULL graph, PIECEWISE graph or eager for each step",
    "spec_warmup": "the JIT warmup's passes under MTP (0.33.0 adds a greedy one)",
    "full_refused": "HiSparse refuses cudagraph_mode=FULL (0.32.0 and later)",
    "extensible_kv_cache": "0.34.0: the extensible KV cache, on unless the pool is fixed",
    "no_graph_memory_profile": "0.34.0: with it, memory profiling captures no CUDA graph",
    "warmup_when_extensible": "0.34.0: with it, the JIT warmup runs even under enforce_eager",
    "sizing_warmup": "0.34.0: the KV-cache sizing warmup, after the JIT warmup",
    "mixed_warmup": "0.34.0: a sizing step, one decode request and full-length prefills",
    "context_warmup": "0.34.0: the sizing step over cached context (MLA)",
    "context_workspace": "0.34.0: MLA's chunked-context workspace, which sizes that step",
    "sampler_warmup": "0.34.0: the sampler's dummy run of min(S, B) tokens after capture",
    "split_capture_sizes": "0.34.0: decode graphs by request count, rounded from the sizes",
    "draft_capture_sizes": "0.34.0: the MTP drafter's one-token graphs, 1 to S requests",
}


def where_in_vllm(key: str = "0.31.0", open_: bool = False) -> str:
    """A collapsible "Where in vLLM" table for one :data:`~hisparse_model.model.versions.RULES` key."""
    rules = RULES[key]
    rows = [[esc(MEANING[name]), cite_html(cite)] for name, cite in rules.cites.items()]
    return (f"<details class='hs-where'{' open' if open_ else ''}><summary><b>Where in vLLM "
            f"{esc(rules.vllm_version)}</b> (file:line of every rule the model follows; a test "
            f"opens each one in vLLM's installed sources)</summary>"
            f"{table(['rule', 'vLLM source'], rows, raw=True)}</details>")
