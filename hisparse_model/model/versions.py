"""Everything that differs between the vLLM versions the model knows, in one place.

One :class:`VersionRules` per routing regime: 0.31.0 (the off-by-one),
0.31.0 + the upstream fix's predicate, 0.32.0 (the fix) and 0.33.0 (every
all-resident prefill takes the all-resident path).  Each holds

* the routing predicate of ``convert_logical_to_physical_topk`` and the
  backends' hand-off (which tokens of a batch reach it),
* what vLLM rejects that depends on the version (the speculative-decoding
  slot check),
* the vLLM ``file:line`` of every rule, per version (:attr:`VersionRules.cites`;
  ``tests/test_citations.py`` opens each one in the installed sources).

No other module branches on the version: they ask :func:`rules_for` (or :func:`since`, for
the scheduler's rules that hold from one release on).

A release the model does not cover yet can be tried as a *candidate*
(``HISPARSE_EXTRA_VLLM=X.Y.Z``, what ``scripts/vllm_release_check.py`` sets): it gets the
newest covered version's rules and no citations, so that the CPU cross-checks, run against
its own code, show where it behaves otherwise.  Nothing else sets it; a user never sees it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import NamedTuple

COVERED = ("0.31.0", "0.32.0", "0.33.0", "0.34.0")  # the releases the model covers, oldest first
CANDIDATE_ENV = "HISPARSE_EXTRA_VLLM"
# The CPU cross-check drivers (hisparse_model/crosscheck/) run against every covered release's
# own code; a release whose driver is not ported yet names it here ({release: (driver, ...)}),
# and the README says what its answers rest on meanwhile.  None is pending: 0.34.0's start-up
# and DP-sync drivers were ported on 2026-12-04.
DRIVERS_PENDING: dict[str, tuple[str, ...]] = {}


def candidate() -> str | None:
    """The release tried with the newest covered version's rules, if any (see above)."""
    version = os.environ.get(CANDIDATE_ENV, "")
    parts = version.split(".")
    if version in COVERED or len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return version


def cross_checked(driver: str = "") -> tuple[str, ...]:
    """The versions a CPU cross-check ``driver`` runs for: every covered one but those it is
    pending for (:data:`DRIVERS_PENDING`), and a candidate."""
    covered = tuple(v for v in COVERED if driver not in DRIVERS_PENDING.get(v, ()))
    return covered + ((candidate(),) if candidate() else ())


def since(version: str, first: str) -> bool:
    """Whether ``version`` is ``first`` or a later release (a rule that holds from ``first`` on)."""
    return tuple(map(int, version.split("."))) >= tuple(map(int, first.split(".")))

ALL_RESIDENT = "all_resident"
SWAP_IN = "swap_in"
ROUTES = (SWAP_IN, ALL_RESIDENT)

ERROR_TEMPLATE = (
    "ValueError: HiSparse swap rows exceed the configured speculative decode "
    "capacity: stop={stop}, capacity={capacity}."
)


def swap_error(stop: int, capacity: int) -> str:
    """The exact text ``_step_rows`` raises when swap_in is asked for more than C rows."""
    return ERROR_TEMPLATE.format(stop=stop, capacity=capacity)


class Cite(NamedTuple):
    """A range of lines in the installed ``vllm`` package that holds ``symbol``."""

    path: str  # relative to the vllm package, e.g. "v1/hisparse/runtime.py"
    start: int
    end: int
    symbol: str

    def __str__(self) -> str:
        lines = f"{self.start}" if self.start == self.end else f"{self.start}-{self.end}"
        return f"vllm/{self.path}:{lines} `{self.symbol}`"


def _c(path: str, lines: str, symbol: str) -> Cite:
    start, _, end = lines.partition("-")
    return Cite(path, int(start), int(end or start), symbol)


_IG = "v1/attention/backends/mla/index_group.py"
_RT = "v1/hisparse/runtime.py"
_FA = "v1/attention/backends/mla/flashattn_mla_sparse.py"
_FM = "v1/attention/backends/mla/flashmla_sparse.py"

# name -> version -> where vLLM implements it
_CITES = {
    "q": {v: _c("v1/attention/backend.py", ln, "def max_decode_query_len")
          for v, ln in (("0.31.0", "579-596"), ("0.32.0", "569-586"), ("0.33.0", "572-589"),
                         ("0.34.0", "565-582"))},
    "C": {v: _c(_RT, ln, "def _get_max_swap_rows")
          for v, ln in (("0.31.0", "51-57"), ("0.32.0", "53-59"), ("0.33.0", "56-62"),
                         ("0.34.0", "59-65"))},
    "W": {v: _c(_IG, ln, "workspace_rows + 1")
          for v, ln in (("0.31.0", "365-376"), ("0.32.0", "371-382"), ("0.33.0", "378-389"),
                         ("0.34.0", "378-389"))},
    "max_rows": {v: _c(_IG, ln, "def get_sparse_mla_index_group_max_rows")
                 for v, ln in (("0.31.0", "393-398"), ("0.32.0", "399-404"),
                               ("0.33.0", "406-411"), ("0.34.0", "401-406"))},
    "B": {v: _c("engine/arg_utils.py", ln, "self.max_num_seqs * model_config.max_model_len")
          for v, ln in (("0.31.0", "3102-3105"), ("0.32.0", "3167-3170"),
                        ("0.33.0", "3221-3224"), ("0.34.0", "3256-3259"))},
    "B>=S": {v: _c("config/scheduler.py", ln, "self.max_num_batched_tokens < self.max_num_seqs")
             for v, ln in (("0.31.0", "329"), ("0.32.0", "328"), ("0.33.0", "331"),
                           ("0.34.0", "375"))},
    "spec_slots": {
        "0.31.0": _c("config/vllm.py", "2381", "max_num_batched_tokens <= scheduled_token_delta"),
        "0.32.0": _c("config/vllm.py", "2285", "max_num_batched_tokens <= scheduled_token_delta"),
        "0.33.0": _c("config/vllm.py", "2371", "max_num_batched_tokens <= self.num_lookahead_tokens"),
        "0.34.0": _c("config/vllm.py", "2293", "max_num_batched_tokens <= self.num_lookahead_tokens"),
    },
    "capture_sizes": {v: _c("config/vllm.py", ln, "def _set_cudagraph_sizes")
                      for v, ln in (("0.31.0", "2388"), ("0.32.0", "2292"), ("0.33.0", "2398"),
                                    ("0.34.0", "2322"))},
    "predicate": {
        "0.31.0": _c(_IG, "236", "num_tokens > self.physical_topk_indices.shape[0]"),
        "0.32.0": _c(_IG, "236", "num_tokens > cache.runtime.max_swap_rows"),
        "0.33.0": _c(_IG, "239-242", "cache.num_decode_tokens < cache.num_actual_tokens"),
        "0.34.0": _c(_IG, "236-239", "cache.num_decode_tokens < cache.num_actual_tokens"),
    },
    "spec_warmup": {
        "0.31.0": _c("v1/worker/gpu/warmup.py", "235", "_warmup_kernels(model_runner"),
        "0.32.0": _c("v1/worker/gpu/warmup.py", "240", "_warmup_kernels(model_runner"),
        "0.33.0": _c("v1/worker/gpu/warmup.py", "242-247", "greedy=True"),
        "0.34.0": _c("v1/worker/gpu/warmup.py", "558-563", "greedy=True"),
    },
    "full_refused": {
        "0.32.0": _c("config/vllm.py", "1816-1818", "HiSparse does not support cudagraph_mode=FULL"),
        "0.33.0": _c("config/vllm.py", "1892-1894", "HiSparse does not support cudagraph_mode=FULL"),
        "0.34.0": _c("config/vllm.py", "1823-1825", "HiSparse does not support cudagraph_mode=FULL"),
    },
    "error": {v: _c(_RT, ln, "HiSparse swap rows exceed the configured speculative decode")
              for v, ln in (("0.31.0", "897-907"), ("0.32.0", "909-919"), ("0.33.0", "930-940"),
                        ("0.34.0", "855-865"))},
    "handoff": {
        "0.31.0": _c(_FA, "204-260", "num_decode_tokens == 0 and cache.all_context_pages_resident"),
        "0.32.0": _c(_FA, "208-275", "num_decode_tokens == 0 and cache.all_context_pages_resident"),
        "0.33.0": _c("model_executor/layers/attention/sparse_mla_attention.py", "805-812",
                     "all_context_pages_resident"),
        "0.34.0": _c("model_executor/layers/attention/sparse_mla_attention.py", "875-882",
                     "all_context_pages_resident"),
    },
    # the start-up steps and serving dispatch the notebooks cite: name, file, symbol, line per version
    **{name: dict(zip(COVERED, (_c(path, ln, sym) for ln in lines)))
       for name, path, sym, lines in (
           ("memory_profile", "v1/worker/gpu_worker.py", "def determine_available_memory",
            ("571", "634", "641", "673")),
           ("startup", "v1/worker/gpu_worker.py", "def compile_or_warm_up_model",
            ("829", "908", "933", "1017")),
           ("warmup", "v1/worker/gpu/warmup.py", "def _warmup_kernels", ("243", "248", "255", "575")),
           ("dispatch", "v1/worker/gpu/cudagraph_utils.py", "def dispatch", ("499", "518", "523", "558")),
       )},
    "handoff_flashmla": {
        "0.31.0": _c(_FM, "815-850", "convert_logical_to_physical_topk"),
        "0.32.0": _c(_FM, "855-890", "convert_logical_to_physical_topk"),
        "0.33.0": _c(_FM, "855-870", "num_decode_tokens < q.shape[0] and cache.all_context_pages_resident"),
        "0.34.0": _c(_FM, "859-874", "num_decode_tokens < q.shape[0] and cache.all_context_pages_resident"),
    },
    # 0.34.0's start-up and capture sizes (startup.py, plan.py)
    **{name: {"0.34.0": _c(path, ln, sym)} for name, path, ln, sym in (
        ("extensible_kv_cache", "config/vllm.py", "3208", "num_gpu_blocks_override is not None"),
        ("no_graph_memory_profile", "v1/worker/gpu/model_runner.py", "1123-1125",
         "if self.cache_config.enable_extensible_kv_cache:"),
        ("warmup_when_extensible", "v1/worker/gpu_worker.py", "1074-1079",
         "or self.cache_config.enable_extensible_kv_cache"),
        ("sizing_warmup", "v1/worker/gpu/warmup.py", "483", "def run_kv_cache_sizing_warmup"),
        ("mixed_warmup", "v1/worker/gpu/warmup.py", "168", "def run_mixed_prefill_decode_warmup"),
        ("context_warmup", "v1/worker/gpu/warmup.py", "378", "def run_context_prefill_warmup"),
        ("context_workspace", "model_executor/layers/attention/mla_attention.py", "2534-2554",
         "def determine_chunked_prefill_workspace_size"),
        ("sampler_warmup", "v1/worker/gpu_worker.py", "1179-1193", "_dummy_sampler_run"),
        ("split_capture_sizes", "config/vllm.py", "2558-2666",
         "min(cdiv(s, q), max_num_seqs)"),
        ("draft_capture_sizes", "config/vllm.py", "708-730",
         "decode_cudagraph_capture_grid(self.scheduler_config.max_num_seqs)"),
    )},
}


@dataclass(frozen=True)
class VersionRules:
    """The routing regime and version-dependent checks of one vLLM release (or 0.31.0 + fix)."""

    key: str  # "0.31.0", "0.31.0+fix", "0.32.0", "0.33.0"
    vllm_version: str  # whose sources the citations point into
    predicate_text: str
    routes_on_workspace: bool  # swap_in for n <= W = C + 1 (the off-by-one)
    resident_prefill_bypass: bool  # all-resident batches with prefill skip swap_in (0.33.0)
    whole_batch_handoff: bool  # every backend hands the whole batch when it can (0.33.0)
    spec_slots_are_lookahead: bool  # B must exceed K (0.33.0), not 0 (0.31.0/0.32.0)
    spec_warmup_passes: int  # JIT warmup runs under MTP: 1, or 2 in 0.33.0 (a greedy pass)
    refuses_full_cudagraph: bool  # HiSparse refuses cudagraph_mode=FULL (0.32.0, 0.33.0)
    fused_draft_decode: bool  # FLASH_ATTN's draft steps share one graph (0.32.0, 0.33.0)
    # 0.34.0: the extensible KV cache is on unless a fixed pool is asked for; it skips the
    # CUDA-graph memory profile, runs the JIT warmup even under enforce_eager, and sizes the
    # cache on warmup steps of its own (startup.py)
    extensible_kv_cache: bool = False
    sampler_warmup: bool = False  # 0.34.0: the V2 runner's sampler dummy run after capture
    split_capture_sizes: bool = False  # 0.34.0: prefill tokens, decode requests, draft sizes
    # 0.34.0: SpeculativeConfig itself refuses parallel drafting for MTP
    # (vllm/config/speculative.py:1688-1693@0.34.0 `parallel_drafting is only supported by the dflash and dspark`)
    spec_config_refuses_parallel_drafting: bool = False
    cites: dict = field(repr=False, compare=False, default_factory=dict)

    @property
    def crashes(self) -> bool:
        """Whether any batch can reach swap_in with more than C tokens."""
        return self.routes_on_workspace

    def handoff_rule(self, backend: str, all_resident: bool = True):
        """``(n, decode) ->`` tokens of an ``n``-token batch (``decode`` of them decodes)
        handed to the routing.

        0.31.0/0.32.0 FLASH_ATTN_MLA_SPARSE: the decode part, or the whole batch
        when it has no decode and its pages are all resident (a mixed batch's
        prefill is staged); FLASHMLA_SPARSE: the decode part only.  0.33.0,
        every backend: the whole batch when it is decode-only or all resident,
        else the decode part.  (The rule is chosen once; a walk applies it per batch.)
        """
        if self.whole_batch_handoff:
            if all_resident:
                return lambda n, decode: n
            return lambda n, decode: n if decode == n else decode
        if backend == "FLASHMLA_SPARSE" or not all_resident:
            return lambda n, decode: decode
        return lambda n, decode: n if decode == 0 else decode

    def swap_in_rule(self, capacity: int, all_resident: bool = True):
        """``(n, has_prefill) ->`` whether ``convert_logical_to_physical_topk`` sends ``n``
        routed tokens to swap_in (else to the all-resident path)."""
        limit = capacity + 1 if self.routes_on_workspace else capacity  # W = C + 1 rows, or C
        if self.resident_prefill_bypass and all_resident:  # 0.33.0: prefills stay resident
            return lambda n, has_prefill: not has_prefill and n <= limit
        return lambda n, has_prefill: n <= limit

    def router(self, backend: str, capacity: int, all_resident: bool = True):
        """:meth:`handoff_rule` then :meth:`swap_in_rule`: ``(n, decode) ->`` (routed tokens,
        route, error); (0, None, None) when nothing is handed over; swap_in raises past
        C rows, so its ``stop`` is the routed count.

        The model's one routing declaration: the start-up and serving walks, simulate,
        the charts and the CPU cross-check against vLLM's own routing
        (``tests/test_vllm_crosscheck.py``) all route through it."""
        handoff = self.handoff_rule(backend, all_resident)
        to_swap_in = self.swap_in_rule(capacity, all_resident)

        def route(n: int, decode: int) -> tuple[int, str | None, str | None]:
            routed = handoff(n, decode)
            if not routed:
                return 0, None, None
            if not to_swap_in(routed, decode < n):  # decode < n: the batch has a prefill
                return routed, ALL_RESIDENT, None
            return routed, SWAP_IN, (swap_error(routed, capacity) if routed > capacity else None)

        return route

    def spec_slot_error(self, b: int, k: int, parallel_drafting: bool) -> str | None:
        """vLLM's refusal when B leaves no room for speculative tokens, else None."""
        if not k:
            return None
        if self.spec_slots_are_lookahead:  # num_lookahead_tokens = K for MTP
            limit, name = k, "num_lookahead_tokens"
        else:  # scheduled_token_delta: K - 1 new slots with parallel drafting, else none
            limit, name = (k - 1 if parallel_drafting else 0), "scheduled_token_delta"
        if b <= limit:
            return ("max_num_batched_tokens: VllmConfig does not have enough slots to "
                    "schedule a token and support the speculative decoding settings. "
                    f"Got max_num_batched_tokens={b} and {name}={limit}.")
        return None


def _rules(key, version, text, *, workspace=False, bypass=False, whole=False, lookahead=False,
           spec_warmups=1, newer=False, extensible=False):
    cites = {name: per_version[version] for name, per_version in _CITES.items()
             if version in per_version}
    return VersionRules(key, version, text, workspace, bypass, whole, lookahead, spec_warmups,
                        newer, newer, extensible, extensible, extensible, extensible, cites)


RULES = {
    "0.31.0": _rules("0.31.0", "0.31.0", "swap_in if n <= W = C + 1, else all-resident",
                     workspace=True),
    "0.31.0+fix": _rules("0.31.0+fix", "0.31.0",
                         "swap_in if n <= C, else all-resident (the upstream fix)"),
    "0.32.0": _rules("0.32.0", "0.32.0", "swap_in if n <= C, else all-resident", newer=True),
    "0.33.0": _rules("0.33.0", "0.33.0",
                     "swap_in if n <= C and the batch is decode-only (or not all resident), "
                     "else all-resident", bypass=True, whole=True, lookahead=True, spec_warmups=2,
                     newer=True),
    # the same routing, hand-off and checks as 0.33.0 (docs/releases/0.34.0-review.md, the
    # CPU cross-checks and the H200 recordings); the start-up and capture sizes changed
    "0.34.0": _rules("0.34.0", "0.34.0",
                     "swap_in if n <= C and the batch is decode-only (or not all resident), "
                     "else all-resident", bypass=True, whole=True, lookahead=True, spec_warmups=2,
                     newer=True, extensible=True),
}


if candidate():  # the newest covered version's rules, under the candidate's name
    RULES[candidate()] = replace(RULES[COVERED[-1]], key=candidate(), vllm_version=candidate(),
                                 cites={})


def rules_for(knobs) -> VersionRules:
    """The rules in force for a :class:`~hisparse_model.model.knobs.Knobs`."""
    key = knobs.vllm_version + ("+fix" if knobs.routing == "fix" else "")
    return RULES[key]

