"""What the knobs resolve to before the first batch runs: B, q, C, W, CUDA graphs.

:func:`plan` models only what a :class:`~hisparse_model.model.knobs.Knobs` can reach
for the fix PR's setup (DeepSeek-V3.2 through the offline ``LLM`` class on one
H200 per rank, HiSparse on, so Model Runner V2; every TP and DP rank resolves the
same plan, ``parallel.py``):

B, tokens per engine step
    the user's value, else ``min(S * max_model_len, 16384)``: the offline
    ``LLM`` class's table value for a GPU of 70 GiB or more
    (vllm/engine/arg_utils.py:2861 `UsageContext.LLM_CLASS: 16384`) clamped by
    vllm/engine/arg_utils.py:3102-3105 `self.max_num_seqs * model_config.max_model_len`.
q, tokens per decode request
    1, or 1 + K under MTP: HiSparse forces the V2 runner, for which
    vllm/v1/attention/backend.py:579-596 `def max_decode_query_len` counts one
    verification request.
C = min(B, S * q), the swap rows
    vllm/v1/hisparse/runtime.py:51-57 `def _get_max_swap_rows`.
W = C + 1, the index-group workspace rows
    vllm/v1/attention/backends/mla/index_group.py:365-376 `workspace_rows + 1`.
CUDA-graph mode
    DeepSeek-V3.2 gets breakable CUDA graphs and no torch.compile
    (vllm/config/vllm.py:82 `DeepseekV32ForCausalLM`), so the default -O2 mode
    FULL_AND_PIECEWISE stays; both sparse backends report UNIFORM_BATCH, so a
    requested FULL becomes FULL_DECODE_ONLY
    (vllm/config/compilation.py:1391-1415 `min_cg_support != AttentionCGSupport.ALWAYS`);
    enforce_eager means NONE.
capture sizes
    vllm/config/vllm.py:2388 `def _set_cudagraph_sizes`: a grid 1, 2, 4,
    every 8 below 256, every 16 from 256, up to min(B, 2 S q, 512); B itself
    when it fits; the uniform-decode sizes (S, or n q for n on the request grid).
    Capture descriptors: vllm/v1/worker/gpu/cudagraph_utils.py:249-386 `def _init_candidates`.

Line numbers are 0.31.0's; ``versions.py`` holds every version's.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass

from .knobs import Knobs
from .served_model import model_of
from .host_pool import host_refusal
from .kv_layout import buffer_refusal
from .kv_pool import admission_refusal
from .parallel import parallel_config_refusal, vllm_config_refusal
from .versions import VersionRules, rules_for

LLM_CLASS_MAX_BATCHED_TOKENS = 16_384  # tokens/step: the offline LLM class on a >= 70 GiB GPU
PLATFORM_MAX_CAPTURE = 512  # tokens: largest default CUDA graph on SM90
DEFAULT_CUDAGRAPH_MODE = "FULL_AND_PIECEWISE"  # -O2's mode
# Mixed-batch half of each mode (vllm/config/compilation.py:53-112 `class CUDAGraphMode`)
MIXED_MODE = {"FULL_AND_PIECEWISE": "PIECEWISE", "PIECEWISE": "PIECEWISE",
              "FULL_DECODE_ONLY": None, "NONE": None}
DECODE_FULL = ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY")  # modes with FULL decode graphs

# A capture descriptor: (tokens, requests or None = spread over min(T, S), uniform q or None)
Descriptor = tuple


@dataclass(frozen=True)
class Plan:
    """The resolved configuration every batch walk starts from."""

    knobs: Knobs
    rules: VersionRules
    max_num_batched_tokens: int  # B, tokens per step
    max_decode_query_len: int  # q, tokens per decode request
    swap_capacity: int  # C = min(B, S * q), rows
    workspace_rows: int  # W = C + 1, rows
    cudagraph_mode: str  # the V2 runner's mode: NONE, PIECEWISE, FULL_DECODE_ONLY, ...
    capture_sizes: tuple[int, ...]  # tokens per captured graph, ascending
    piecewise: tuple[Descriptor, ...]  # PIECEWISE captures, largest first
    full: tuple[Descriptor, ...]  # FULL decode captures, largest first
    draft_sizes: tuple[int, ...] = ()  # the MTP drafter's one-token FULL graphs (K >= 2), ascending

    def __hash__(self) -> int:
        # A plan is a function of its knobs, so equal plans have equal knobs and
        # this agrees with ==; it keeps the start-up memo's key cheap (the
        # generated hash would walk every capture descriptor).
        return hash(self.knobs)


def default_max_num_batched_tokens(max_num_seqs: int, max_model_len: int) -> int:
    """B when the user leaves it unset: min(S * max_model_len, 16384) tokens per step."""
    return min(max_num_seqs * max_model_len, LLM_CLASS_MAX_BATCHED_TOKENS)


def cudagraph_mode(knobs: Knobs) -> str:
    """The mode the V2 runner captures and dispatches with (see the module docstring)."""
    if knobs.enforce_eager:
        return "NONE"
    mode = knobs.cudagraph_mode or DEFAULT_CUDAGRAPH_MODE
    return "FULL_DECODE_ONLY" if mode == "FULL" else mode


# The capture-size grid up to the platform's largest graph: 1, 2, 4, then every 8
# below 256, then every 16 from 256.  Every limit capture_sizes() takes is at
# most PLATFORM_MAX_CAPTURE, so each grid it needs is a prefix of this one.
GRID = (1, 2, 4, *range(8, 256, 8), *range(256, PLATFORM_MAX_CAPTURE + 1, 16))


def _grid(limit: int) -> tuple[int, ...]:
    """1, 2, 4, then every 8 below 256, then every 16 from 256, up to ``limit`` <= 512 tokens."""
    return GRID[:bisect.bisect_right(GRID, limit)]


def capture_sizes(s: int, b: int, q: int) -> tuple[int, ...]:
    """Default ``cudagraph_capture_sizes`` (tokens) for S requests, B tokens, q per decode."""
    cap0 = min(s * q * 2, PLATFORM_MAX_CAPTURE)  # tokens: two decode steps' worth
    cap = min(b, cap0)  # tokens
    sizes = set(_grid(cap))
    if b <= cap:
        sizes.add(b)  # the whole step, when it fits
    # the uniform decode sizes that fit both cap0 and B
    if q > 1:  # n requests of q tokens, n on the request grid (or every request)
        reqs = min(s, PLATFORM_MAX_CAPTURE)
        sizes.update(n * q for n in (*_grid(reqs), reqs) if n * q <= cap)
    elif s <= cap:  # S requests of one token
        sizes.add(s)
    return tuple(sorted(sizes))


def _descriptors(mode: str, sizes: tuple[int, ...], s: int, q: int):
    """(PIECEWISE, FULL) capture descriptors, each largest first."""
    if mode == "NONE" or not sizes:
        return (), ()
    piecewise = full = ()
    if MIXED_MODE[mode] == "PIECEWISE":  # one graph per size, for any batch of that many tokens
        piecewise = tuple([(t, None, None) for t in reversed(sizes)])
    if mode in DECODE_FULL:  # a uniform decode graph of whole q-token requests
        # each size rounded up to whole requests (tokens): the sizes ascend, so
        # do the rounded ones, and dict.fromkeys drops the repeats in order
        rounded = sizes if q == 1 else tuple(dict.fromkeys([-(-t // q) * q for t in sizes]))
        top = min(s * q, sizes[-1])  # at most S requests, and no larger than the largest size
        tokens = rounded[:bisect.bisect_right(rounded, top)]  # those <= top
        full = tuple([(t, t // q, q) for t in reversed(tokens)])
    return piecewise, full


def _walk_grid(limit: int) -> list[int]:
    """vLLM 0.34.0's request-count grid up to ``limit``: every count up to 6, then steps of
    the largest power of two not above 0.65 n^(2/3)
    (vllm/config/compilation.py:78-86@0.34.0 `def _walk_grid`,
    vllm/config/compilation.py:122-126@0.34.0 `def decode_cudagraph_capture_grid`)."""
    grid, n = [], 1
    while n < limit:
        grid.append(n)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, 0.65 * n ** (2 / 3)))))
        n = (n // stride + 1) * stride
    return [*grid, limit] if limit else []


def _split_sizes(mode: str, shared: tuple[int, ...], s: int, b: int, q: int, k: int):
    """0.34.0's (capture sizes, PIECEWISE tokens, FULL decode requests, draft sizes) from
    the shared sizes: PIECEWISE graphs take the shared sizes as prefill token counts; the
    FULL decode graphs take request counts, the shared sizes rounded up to whole q-token
    requests (at most S) within the largest, kept up to the first that holds
    min(S, B // q) and capped there; under MTP K >= 2 the drafter's one-token graphs take
    the request grid up to S; the capture sizes are all their token counts
    (vllm/config/vllm.py:2558-2666@0.34.0 `min(cdiv(s, q), max_num_seqs)`,
    vllm/config/compilation.py:54-68@0.34.0 `def decode_cudagraph_capture_shapes`)."""

    def shapes(sizes: list[int], limit: int) -> list[int]:
        reachable = sizes[:bisect.bisect_left(sizes, limit) + 1]
        return sorted({min(n, limit) for n in reachable}) if limit >= 1 else []

    top = shared[-1]
    requests = sorted({min(-(-t // q), s) for t in shared if -(-t // q) * q <= top})
    decode = shapes(requests, min(s, b // q)) if mode in DECODE_FULL else []
    drafts = shapes(_walk_grid(s), min(s, b)) if k >= 2 and mode in DECODE_FULL else []
    tokens = {n * q for n in decode} | set(drafts)
    prefill = shared if MIXED_MODE[mode] == "PIECEWISE" else ()
    return tuple(sorted(tokens | set(prefill))), prefill, decode, tuple(drafts)


def recorded_capture_sizes(rules: VersionRules, mode: str, s: int, b: int, k: int
                           ) -> tuple[int, ...]:
    """The ``cudagraph_capture_sizes`` vLLM records for these knobs (graphs on): the shared
    sizes, or 0.34.0's token counts of every graph (:func:`_split_sizes`)."""
    sizes = capture_sizes(s, b, 1 + k)
    if rules.split_capture_sizes and sizes:
        return _split_sizes(mode, sizes, s, b, 1 + k, k)[0]
    return sizes


def refusal(knobs: Knobs, rules: VersionRules, b: int, derived: bool) -> str | None:
    """vLLM's reason for refusing these knobs, in the order vLLM checks, or None."""
    s, k = knobs.max_num_seqs, knobs.num_speculative_tokens
    longest = model_of(knobs).max_position_embeddings
    if knobs.max_model_len > longest:
        # vllm/config/model.py:2600-2605 `User-specified max_model_len`
        return (f"max_model_len: User-specified max_model_len ({knobs.max_model_len}) is "
                "greater than the derived max_model_len (max_position_embeddings="
                f"{float(longest)} or model_max_length=None in model's config.json). "
                "To allow overriding this maximum, set the env var "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used "
                "with extreme caution. If the model uses relative position encoding (RoPE), "
                "positions exceeding derived_max_model_len lead to nan. If the model uses "
                "absolute position encoding, positions exceeding derived_max_model_len will "
                "cause a CUDA array out-of-bounds error.")
    parallel = parallel_config_refusal(knobs)  # ParallelConfig is built before SchedulerConfig
    if parallel:
        return parallel
    if b < s:  # vllm/config/scheduler.py:329 `self.max_num_batched_tokens < self.max_num_seqs`
        how = (" (max_num_batched_tokens was derived as min(max_num_seqs * max_model_len, "
               f"{LLM_CLASS_MAX_BATCHED_TOKENS}); set it)") if derived else ""
        return (f"max_num_batched_tokens ({b}) must be greater than or equal to "
                f"max_num_seqs ({s}).{how}")
    if knobs.parallel_drafting and k and rules.spec_config_refuses_parallel_drafting:
        # 0.34.0: the speculative config refuses it as it is built, before VllmConfig's checks
        return ("parallel_drafting: parallel_drafting is only supported by the dflash and dspark "
                "methods, not 'mtp'.")
    parallel = vllm_config_refusal(knobs)  # VllmConfig: heads over TP, then HiSparse's PP / DCP
    if parallel:
        return parallel
    if rules.refuses_full_cudagraph and not knobs.enforce_eager and knobs.cudagraph_mode == "FULL":
        return ("cudagraph_mode: HiSparse does not support cudagraph_mode=FULL; use "
                "FULL_AND_PIECEWISE (the default), which captures FULL graphs for decode batches.")
    slots = rules.spec_slot_error(b, k, knobs.parallel_drafting)
    if slots:
        return slots
    if knobs.parallel_drafting and k:
        # HiSparse forces Model Runner V2, which refuses it in every version:
        # vllm/config/vllm.py:3088-3092 `parallel drafting for EAGLE speculative decoding`,
        # raised by vllm/config/vllm.py:3315-3323 `def _validate_v2_model_runner`.
        return ("parallel_drafting: Model Runner V2 does not yet support: parallel drafting "
                "for EAGLE speculative decoding (HiSparse forces Model Runner V2)")
    # then the hot buffer, as the attention layers are built (kv_layout.py); checked last:
    # when the engine core sizes the KV cache, the GPU pool's admission and then the host
    # pool's blocks
    return buffer_refusal(knobs) or admission_refusal(knobs, b) or host_refusal(knobs)


@functools.lru_cache(maxsize=1 << 14)
def plan(knobs: Knobs) -> Plan:
    """Resolve the knobs; raises ValueError (naming the knob) where vLLM refuses them."""
    rules = rules_for(knobs)
    s = knobs.max_num_seqs
    b = knobs.max_num_batched_tokens
    derived = b is None
    if derived:
        b = default_max_num_batched_tokens(s, knobs.max_model_len)
    error = refusal(knobs, rules, b, derived)
    if error:
        raise ValueError(error)
    k = knobs.num_speculative_tokens
    q = 1 + k
    c = min(b, s * q)  # rows: requests * tokens per request, capped by B
    mode = cudagraph_mode(knobs)
    graphs = not knobs.enforce_eager and knobs.cudagraph_mode != "NONE"
    sizes = capture_sizes(s, b, q) if graphs else ()
    if rules.split_capture_sizes and sizes:
        sizes, prefill, decode, drafts = _split_sizes(mode, sizes, s, b, q, k)
        piecewise = tuple([(t, None, None) for t in reversed(prefill)])
        full = tuple([(n * q, n, q) for n in reversed(decode)])
    else:
        piecewise, full = _descriptors(mode, sizes, s, q)
        # the drafter's one-token graphs: the capture sizes of at most S tokens
        drafts = tuple(t for t in sizes if t <= s) if k >= 2 and mode in DECODE_FULL else ()
    return Plan(knobs, rules, b, q, c, c + 1, mode, sizes, piecewise, full, drafts)
