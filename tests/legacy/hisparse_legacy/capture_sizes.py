"""CUDA-graph capture sizes, compile ranges, warmup sizes and cudagraph mode.

Pure-Python model of vLLM 0.31.0 / 0.32.0 / 0.33.0 for our setup: DeepSeek-V3.2
(``DeepseekV32ForCausalLM``) offline through ``vllm.LLM`` on one H200 (SM 9.0),
TP=1, PP=1, DP=1, no LoRA, HiSparse on => Model Runner V2.

What vLLM does, in order (``VllmConfig.__post_init__`` then the V2 runner):

1. ``enforce_eager`` -> compilation mode NONE and cudagraph_mode NONE.
2. ``_maybe_enable_breakable_cudagraph``: ``DeepseekV32ForCausalLM`` is in
   ``DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES`` on CUDA, so unless the user
   exported ``VLLM_USE_BREAKABLE_CUDAGRAPH`` vLLM sets it to "1" and forces the
   compilation mode to NONE (no torch.compile at all).
3. compilation mode, if still unset: VLLM_COMPILE for -O1..-O3, NONE for -O0.
4. optimization-level defaults fill an unset cudagraph_mode: O0 NONE,
   O1 PIECEWISE, O2 (default) / O3 FULL_AND_PIECEWISE.
5. ``_normalize_piecewise_cudagraph_mode``: a piecewise mode without
   VLLM_COMPILE and without breakable graphs drops its piecewise half.
6. ``_set_cudagraph_sizes`` -> ``compilation_config.cudagraph_capture_sizes``
   and ``max_cudagraph_capture_size`` (the lists modelled here).
7. ``set_splitting_ops_for_v1``: not VLLM_COMPILE -> ``splitting_ops = []``
   (attention is *not* a splitting op), else the attention ops.
8. ``_set_compile_ranges`` -> endpoints ``[B]`` (+ user endpoints); no
   SP / allreduce-RMS / rope-KV fusion endpoints can appear at TP=1 on CUDA.
9. V2 runner ``resolve_cudagraph_mode_and_sizes`` with the weakest
   ``AttentionCGSupport`` of all attention groups and
   ``piecewise_capture_available = VLLM_USE_BREAKABLE_CUDAGRAPH or
   has_compiled_submodule(model)``.  With ``use_v2_model_runner=True`` the
   capture sizes are *not* rounded to multiples of (1 + k) (that rounding is
   V1-only).
10. ``compile_or_warm_up_model``: extra ``_dummy_run`` sizes only when the
    compilation mode is VLLM_COMPILE *and* the model has a compiled
    submodule -- never the case for DeepSeek-V3.2 on CUDA (its
    ``DeepseekV32Model`` has no ``@support_torch_compile``), so [] by default.

Version differences relevant to the functions below (TP=1, CUDA):

=====================================  ==========  ==========  ==========
rule                                   0.31.0      0.32.0      0.33.0
=====================================  ==========  ==========  ==========
SP filter of capture sizes (TP>1 only)  present     removed     removed
SP compile-range endpoint (TP>1 only)   present     removed     removed
FLASHINFER_MLA_SPARSE (SM100 TRT-LLM)   ALWAYS      UNIFORM_    UNIFORM_
builder cudagraph support                           BATCH       BATCH
warmup entry point                      compile_or_ same        wrapper +
                                        warm_up_               _compile_or_
                                        model                  warm_up_model
=====================================  ==========  ==========  ==========

Everything else used here is textually identical across the three versions;
at TP=1 the SP rows cannot apply, so sizes / ranges / warmups coincide.
Line numbers are ``vllm/<path>:<line>`` in /work/vsrc/src-<version>/vllm.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

__all__ = [
    "SUPPORTED_VERSIONS",
    "CUDAGRAPH_MODES",
    "SPARSE_MLA_BACKENDS",
    "CapturePlan",
    "cudagraph_capture_plan",
    "default_cudagraph_capture_sizes",
    "max_cudagraph_capture_size",
    "compile_ranges",
    "compile_warmup_sizes",
    "resolved_cudagraph_mode",
    "config_time_cudagraph_mode",
]

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.31.0", "0.32.0", "0.33.0")

CUDAGRAPH_MODES = (
    "NONE",
    "PIECEWISE",
    "FULL",
    "FULL_DECODE_ONLY",
    "FULL_AND_PIECEWISE",
)
# (decode_mode, mixed_mode) of each CUDAGraphMode; plain modes use themselves
# for both (config/compilation.py:53-112 in all three versions).
_MODE_PARTS = {
    "NONE": ("NONE", "NONE"),
    "PIECEWISE": ("PIECEWISE", "PIECEWISE"),
    "FULL": ("FULL", "FULL"),
    "FULL_DECODE_ONLY": ("FULL", "NONE"),
    "FULL_AND_PIECEWISE": ("FULL", "PIECEWISE"),
}
# CUDAGraphMode.without_piecewise (config/compilation.py:80-85, all versions)
_WITHOUT_PIECEWISE = {
    "PIECEWISE": "NONE",
    "FULL_AND_PIECEWISE": "FULL_DECODE_ONLY",
}
# OPTIMIZATION_LEVEL_0x["compilation_config"]["cudagraph_mode"]:
# config/vllm.py:270,293,316,339 (0.31.0) / :261,282,303,324 (0.32.0) /
# :269,290,311,332 (0.33.0).
_OPT_LEVEL_CUDAGRAPH_MODE = {
    0: "NONE",
    1: "PIECEWISE",
    2: "FULL_AND_PIECEWISE",
    3: "FULL_AND_PIECEWISE",
}

# AttentionCGSupport values (v1/attention/backend.py:566-575 in 0.31.0).
_NEVER, _UNIFORM_SINGLE_TOKEN_DECODE, _UNIFORM_BATCH, _ALWAYS = 0, 1, 2, 3
_CG_SUPPORT_NAMES = {0: "NEVER", 1: "UNIFORM_SINGLE_TOKEN_DECODE",
                     2: "UNIFORM_BATCH", 3: "ALWAYS"}


class _Backend(NamedTuple):
    cg_support: int  # AttentionCGSupport of the metadata builder
    capability_majors: tuple[int, ...]  # supports_compute_capability


# Per-version sparse-MLA backend facts (registry name -> builder support,
# SM majors accepted).  Cites (builder `_cudagraph_support` line;
# `supports_compute_capability` line), v1/attention/backends/mla/:
#   FLASH_ATTN_MLA_SPARSE  flashattn_mla_sparse.py  :117;:71-72 (0.31.0)
#                          :123;:77-78 (0.32.0) / :128;:82-83 (0.33.0)
#   FLASHMLA_SPARSE        flashmla_sparse.py :318;:171-172 (0.31.0)
#                          :350;:203-204 (0.32.0) / :350;:203-204 (0.33.0)
#   FLASHINFER_MLA_SPARSE  = FlashInferMLASparseTRTLLMBackend (registry.py),
#                          flashinfer_mla_sparse.py :275;:97-98 (0.31.0)
#                          :285;:107-108 (0.32.0) / :281;:105-106 (0.33.0)
#   FLASHINFER_MLA_SPARSE_SM90  flashinfer_mla_sparse_sm90.py builder :419
#                          inherits flashinfer_mla_sparse.py:248 UNIFORM_BATCH;
#                          :178-179 (0.31.0) / :426, :258; :189-190 (0.32.0) /
#                          :426, :254; :189-190 (0.33.0)
_SPARSE_BACKENDS_031 = {
    "FLASH_ATTN_MLA_SPARSE": _Backend(_UNIFORM_BATCH, (9,)),
    "FLASHMLA_SPARSE": _Backend(_UNIFORM_BATCH, (9, 10)),
    "FLASHINFER_MLA_SPARSE": _Backend(_ALWAYS, (10,)),
    "FLASHINFER_MLA_SPARSE_SM90": _Backend(_UNIFORM_BATCH, (9,)),
}
_SPARSE_BACKENDS_032 = {
    "FLASH_ATTN_MLA_SPARSE": _Backend(_UNIFORM_BATCH, (9,)),
    "FLASHMLA_SPARSE": _Backend(_UNIFORM_BATCH, (9, 10)),
    "FLASHINFER_MLA_SPARSE": _Backend(_UNIFORM_BATCH, (10,)),
    "FLASHINFER_MLA_SPARSE_SM90": _Backend(_UNIFORM_BATCH, (9,)),
}


class _VersionRules(NamedTuple):
    backends: dict  # registry name -> _Backend


_VERSION_RULES = {
    "0.31.0": _VersionRules(backends=_SPARSE_BACKENDS_031),
    "0.32.0": _VersionRules(backends=_SPARSE_BACKENDS_032),
    "0.33.0": _VersionRules(backends=dict(_SPARSE_BACKENDS_032)),
}
SPARSE_MLA_BACKENDS: tuple[str, ...] = tuple(_SPARSE_BACKENDS_031)

_PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")


class CapturePlan(NamedTuple):
    """``compilation_config`` capture fields after ``_set_cudagraph_sizes``."""

    cudagraph_capture_sizes: tuple[int, ...]  # tokens per captured graph
    max_cudagraph_capture_size: int  # tokens (0 when no graphs)


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _check_version(version) -> _VersionRules:
    rules = _VERSION_RULES.get(version) if isinstance(version, str) else None
    if rules is None:
        raise ValueError(
            f"vllm_version must be one of {SUPPORTED_VERSIONS}, got {version!r}"
        )
    return rules


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def _norm_mode(name: str, mode) -> str | None:
    if mode is None:
        return None
    if not isinstance(mode, str) or mode.upper() not in _MODE_PARTS:
        raise ValueError(f"{name} must be one of {CUDAGRAPH_MODES}, got {mode!r}")
    return mode.upper()


def _check_opt_level(optimization_level) -> None:
    if isinstance(optimization_level, bool) or optimization_level not in (0, 1, 2, 3):
        raise ValueError(
            f"optimization_level must be 0, 1, 2 or 3, got {optimization_level!r}"
        )


def _requires_piecewise(mode: str) -> bool:
    return "PIECEWISE" in _MODE_PARTS[mode]


# --------------------------------------------------------------------------
# cudagraph mode
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _config_time(
    version: str,
    requested: str | None,
    enforce_eager: bool,
    optimization_level: int,
    breakable_cudagraph: bool,
) -> tuple[str, bool]:
    """(cudagraph_mode after VllmConfig.__post_init__, compile mode is VLLM_COMPILE)."""
    _check_version(version)
    if enforce_eager:
        return "NONE", False
    vllm_compile = (not breakable_cudagraph) and optimization_level > 0
    mode = requested if requested is not None else (
        _OPT_LEVEL_CUDAGRAPH_MODE[optimization_level]
    )
    if _requires_piecewise(mode) and not vllm_compile and not breakable_cudagraph:
        mode = _WITHOUT_PIECEWISE[mode]
    return mode, vllm_compile


def config_time_cudagraph_mode(
    version: str,
    *,
    enforce_eager: bool = False,
    requested: str | None = None,
    optimization_level: int = 2,
    breakable_cudagraph: bool | None = None,
) -> str:
    """``compilation_config.cudagraph_mode`` after ``VllmConfig.__post_init__``.

    This is the mode ``_set_cudagraph_sizes`` sees (capture sizes are [] iff it
    is "NONE"); the V2 runner may still downgrade it (``resolved_cudagraph_mode``).
    ``breakable_cudagraph=None`` = vLLM's default for DeepseekV32ForCausalLM on
    CUDA, i.e. True (auto-enabled unless VLLM_USE_BREAKABLE_CUDAGRAPH is set).

    Cites: config/vllm.py:1694-1717 (enforce_eager), :837-865 + :1741
    (breakable, arch list :79-106 incl. "DeepseekV32ForCausalLM" :82),
    :1775-1779 (mode), :1802-1803 (O-level defaults), :1102-1122 + :1861
    (normalize) (0.31.0) / :1691-1714, :812-840 + :1718 (:77), :1752-1756,
    :1779-1780, :1077-1097 + :1854 (0.32.0) / :1766-1789, :842-870 + :1793
    (:81), :1827-1831, :1854-1855, :1129-1149 + :1930 (0.33.0).
    """
    _check_version(version)
    _check_opt_level(optimization_level)
    req = _norm_mode("cudagraph_mode", requested)
    breakable = True if breakable_cudagraph is None else bool(breakable_cudagraph)
    return _config_time(version, req, bool(enforce_eager), optimization_level,
                        breakable)[0]


@functools.lru_cache(maxsize=1024)
def _resolved(version, backend, enforce_eager, requested, optimization_level,
              breakable, device_capability):
    rules = _check_version(version)
    info = rules.backends.get(backend)
    if info is None:
        raise ValueError(
            f"attention_backend must be one of {SPARSE_MLA_BACKENDS}, got {backend!r}"
        )
    major = device_capability[0]
    if major not in info.capability_majors:
        # platforms/cuda.py:448-464 (0.31.0) / :428-444 (0.32.0) / :430-446
        # (0.33.0): an explicitly selected backend whose validate_configuration
        # reports reasons (here "compute capability not supported") raises.
        raise ValueError(
            f"attention_backend {backend} is not valid on compute capability "
            f"{device_capability} (supports SM major {info.capability_majors})"
        )
    mode, vllm_compile = _config_time(
        version, requested, enforce_eager, optimization_level, breakable
    )
    if mode == "NONE":
        return "NONE"
    # Weakest support over all attention groups: the sparse-MLA builder and the
    # DSA indexer builder (v1/attention/backends/mla/indexer.py:863-870 /
    # :991-998 / :992-999): ALWAYS on SM100 with DeepGEMM (varlen paged MQA
    # logits), else UNIFORM_BATCH unless flattening -- either way it cannot go
    # below UNIFORM_BATCH, so on SM90 the minimum is the backend's own value.
    indexer = _ALWAYS if major == 10 else _UNIFORM_BATCH
    support = min(info.cg_support, indexer)
    # set_splitting_ops_for_v1: not VLLM_COMPILE -> splitting_ops = [] so the
    # attention ops are not split out (config/compilation.py:1143-1146 /
    # :1160-1163 / :1167-1170); VLLM_COMPILE -> list(_attention_ops)
    # (:1160 / :1177 / :1184).
    attention_split = vllm_compile
    decode, mixed = _MODE_PARTS[mode]
    # resolve_cudagraph_mode_and_sizes, config/compilation.py:1371-1534 (0.31.0)
    # / :1369-1528 (0.32.0) / :1376-1535 (0.33.0).
    # (a) :1391-1415 / :1388-1412 / :1395-1419:
    # "cudagraph_mode.mixed_mode() == CUDAGraphMode.FULL and
    #  min_cg_support != AttentionCGSupport.ALWAYS"
    if mixed == "FULL" and support != _ALWAYS:
        if support == _NEVER:
            raise ValueError(f"cudagraph_mode {mode} unsupported by {backend}")
        mode = "FULL_AND_PIECEWISE" if attention_split else "FULL_DECODE_ONLY"
        decode, mixed = _MODE_PARTS[mode]
    # (b) decode FULL with NEVER support, (c) spec-decode decode FULL with
    # support < UNIFORM_BATCH: impossible for these backends (>= UNIFORM_BATCH).
    # (d) :1464-1476 / :1461-1473 / :1468-1480: "not piecewise_capture_available
    # and cudagraph_mode.requires_piecewise_compilation()".  The V2 runner passes
    # VLLM_USE_BREAKABLE_CUDAGRAPH or has_compiled_submodule(model)
    # (v1/worker/gpu/model_runner.py:701-703 / :727-729 / :748-750); DSV3.2's
    # DeepseekV32Model (models/deepseek_v32/nvidia/model.py:169) is never
    # torch-compiled, so availability == breakable.
    if not breakable and _requires_piecewise(mode):
        mode = _WITHOUT_PIECEWISE[mode]
    return mode


def resolved_cudagraph_mode(
    version: str,
    backend: str,
    *,
    enforce_eager: bool,
    requested: str | None = None,
    optimization_level: int = 2,
    breakable_cudagraph: bool | None = None,
    device_capability: tuple[int, int] = (9, 0),
) -> str:
    """Cudagraph mode the V2 runner finally uses for DSV3.2 + a sparse-MLA backend.

    Returns "NONE" / "PIECEWISE" / "FULL" / "FULL_DECODE_ONLY" /
    "FULL_AND_PIECEWISE".  Defaults model our run: H200 (SM 9.0), -O2, no
    VLLM_USE_BREAKABLE_CUDAGRAPH in the environment (=> vLLM auto-enables
    breakable CUDA graphs for DeepseekV32ForCausalLM and runs without
    torch.compile).

    Results on the H200, identical in 0.31.0 / 0.32.0 / 0.33.0
    (FLASH_ATTN_MLA_SPARSE, FLASHMLA_SPARSE, FLASHINFER_MLA_SPARSE_SM90 all
    report UNIFORM_BATCH):

    ==================  =====================  ========================
    requested           breakable (default)    VLLM_USE_BREAKABLE_...=0
    ==================  =====================  ========================
    None (O2 default)   FULL_AND_PIECEWISE     FULL_DECODE_ONLY
    FULL_AND_PIECEWISE  FULL_AND_PIECEWISE     FULL_DECODE_ONLY
    PIECEWISE           PIECEWISE              NONE
    FULL                FULL_DECODE_ONLY       FULL_DECODE_ONLY
    FULL_DECODE_ONLY    FULL_DECODE_ONLY       FULL_DECODE_ONLY
    NONE / eager        NONE                   NONE
    ==================  =====================  ========================

    UNIFORM_BATCH does *not* downgrade FULL_AND_PIECEWISE (its mixed half is
    PIECEWISE, not FULL); only a missing piecewise capture path does.
    ``FLASHINFER_MLA_SPARSE`` is the SM100-only TRT-LLM backend: on SM 9.x vLLM
    rejects it (ValueError naming ``attention_backend``).  On SM100 it reports
    ALWAYS in 0.31.0 (``requested="FULL"`` stays FULL, assuming DeepGEMM so the
    indexer is ALWAYS too) and UNIFORM_BATCH in 0.32.0 / 0.33.0.

    Cites: config/compilation.py:1371-1534, v1/worker/gpu/model_runner.py:
    700-720, config/vllm.py:837-865, :1102-1122, :2119-2122 (0.31.0) /
    config/compilation.py:1369-1528, model_runner.py:727-745, config/vllm.py:
    812-840, :1077-1097, :2085-2088 (0.32.0) / config/compilation.py:
    1376-1535, model_runner.py:748-766, config/vllm.py:842-870, :1129-1149,
    :2161-2164 (0.33.0); backend lines in ``_SPARSE_BACKENDS_031`` comments.
    """
    _check_version(version)
    _check_opt_level(optimization_level)
    req = _norm_mode("requested", requested)
    breakable = True if breakable_cudagraph is None else bool(breakable_cudagraph)
    cap = tuple(device_capability)
    if len(cap) != 2 or not all(isinstance(x, int) for x in cap):
        raise ValueError(f"device_capability must be (major, minor), got {cap!r}")
    return _resolved(version, backend, bool(enforce_eager), req,
                     optimization_level, breakable, cap)


# --------------------------------------------------------------------------
# capture sizes
# --------------------------------------------------------------------------


def _stride_grid(limit: int, interactivity: bool) -> list[int]:
    """1,2,4 (or 1..min(limit,32)), then every 8 below 256, every 16 from 256."""
    if interactivity:
        sizes = list(range(1, min(limit, 32) + 1))  # tokens
    else:
        sizes = [n for n in (1, 2, 4) if n <= limit]  # tokens
    if limit >= 8:
        sizes += range(8, min(limit + 1, 256), 8)  # tokens, stride 8
    if limit >= 256:
        sizes += range(256, limit + 1, 16)  # tokens, stride 16
    return sizes


def _request_counts(max_reqs: int, platform_max: int) -> list[int]:
    """Request-count grid used for spec-decode uniform decode sizes."""
    max_reqs = min(max_reqs, platform_max)  # requests
    counts = [n for n in (1, 2, 4) if n <= max_reqs]  # requests
    counts += range(8, min(max_reqs + 1, 256), 8)  # requests, stride 8
    counts += range(256, max_reqs + 1, 16)  # requests, stride 16
    return sorted(set(counts + [max_reqs]))


@functools.lru_cache(maxsize=65536)
def _plan(
    version: str,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int,
    mode: str,
    performance_mode: str,
    blackwell: bool,
    user_sizes: tuple[int, ...] | None,
    user_max: int | None,
) -> CapturePlan:
    _check_version(version)
    if mode == "NONE":
        return CapturePlan((), 0)
    B = max_num_batched_tokens  # tokens / step
    # default_max_graph_size: 1024 tokens on SM100 family, else 512 tokens.
    platform_max = 1024 if blackwell else 512  # tokens
    query_len = 1 + num_speculative_tokens  # tokens per request per decode step
    uniform: list[int] = []  # tokens
    if user_max is None:
        cap = min(max_num_seqs * query_len * 2, platform_max)  # tokens
        if query_len > 1:
            uniform = sorted({
                n * query_len  # tokens = requests * tokens/request
                for n in _request_counts(max_num_seqs, platform_max)
                if n * query_len <= cap
            })
        elif max_num_seqs <= cap:
            uniform = [max_num_seqs]  # tokens (1 token per request)
    else:
        cap = user_max  # tokens
    cap = min(B, cap)  # tokens
    if cap < 1:
        raise ValueError(
            f"max_cudagraph_capture_size must be >= 1 when cuda graphs are used, "
            f"got {cap}"
        )
    if user_sizes is not None:
        sizes = sorted({s for s in user_sizes if s <= B})  # tokens
    else:
        sizes = _stride_grid(cap, performance_mode == "interactivity")
        if B <= cap and B not in sizes:
            sizes.append(B)  # tokens: capture the full batch when it fits
        sizes += [s for s in uniform if s <= B]  # tokens
        sizes = sorted(set(sizes))
    valid_max = sizes[-1] if sizes else 0  # tokens
    if user_max is not None and user_max != valid_max and user_sizes is not None:
        raise ValueError(
            f"max_cudagraph_capture_size ({user_max}) should be consistent with "
            f"the max value of cudagraph_capture_sizes ({valid_max})"
        )
    return CapturePlan(tuple(sizes), valid_max)


def cudagraph_capture_plan(
    version: str,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    enforce_eager: bool = False,
    cudagraph_mode: str | None = None,
    performance_mode: str = "balanced",
    optimization_level: int = 2,
    breakable_cudagraph: bool | None = None,
    device_capability: tuple[int, int] = (9, 0),
    cudagraph_capture_sizes: list[int] | tuple[int, ...] | None = None,
    max_cudagraph_capture_size: int | None = None,
) -> CapturePlan:
    """``(cudagraph_capture_sizes, max_cudagraph_capture_size)`` after config.

    ``VllmConfig._set_cudagraph_sizes`` with defaults (no user sizes / max),
    q = 1 + num_speculative_tokens [tokens/request], P = 512 tokens (1024 on
    SM100 family), B = max_num_batched_tokens, S = max_num_seqs:

    * empty list and max 0 when ``enforce_eager`` or the config-time
      cudagraph_mode is NONE (see ``config_time_cudagraph_mode``);
    * cap = min(S * q * 2, P), then cap = min(B, cap)  [tokens];
    * grid = [1, 2, 4] <= cap (``performance_mode="interactivity"``: 1..min(cap,
      32)), + 8..<min(cap+1, 256) step 8, + 256..cap step 16;
    * + B itself when B <= cap;
    * + uniform-decode sizes (<= B): q == 1: [S] if S <= min(2S, P) (i.e.
      S <= P), which adds e.g. 3 or 5 off-grid; q > 1: n * q for n in the
      request grid (1, 2, 4, 8.., 256.., S; n <= min(S, P)) with n*q <= the
      pre-B cap;
    * sorted, de-duplicated; max = last element.

    No multiple-of-(1+k) rounding: ``adjust_cudagraph_sizes_for_spec_decode``
    only runs for the V1 runner (``not use_v2_model_runner``).  The SP filter
    (0.31.0 only) needs TP > 1.  ``performance_mode="throughput"`` does not touch
    sizes.  User ``cudagraph_capture_sizes`` are de-duplicated, filtered to
    <= B and sorted; giving both user knobs inconsistently is a ValueError.

    Ground truth (0.31.0, H200): S=2, B=640 -> cap=min(4,512)=4 -> [1, 2, 4];
    S=1 -> cap=2 -> [1, 2].

    Cites: config/vllm.py:2388-2656 (cap :2453-2460, uniform :2461-2540,
    B clamp :2541-2542, user list :2550-2561, grid :2562-2595, SP :2597-2605,
    max :2609-2648), :1966-1976 (eager / call site), config/compilation.py:
    1112-1136, :1499-1507 (V1-only rounding) (0.31.0) / config/vllm.py:
    2292-2550 (:2357-2364, :2365-2444, :2445-2446, :2454-2465, :2466-2499,
    no SP, :2503-2542), :1927-1937, config/compilation.py:1129-1153,
    :1496-1501 (0.32.0) / config/vllm.py:2398-2656 (:2463-2470, :2471-2550,
    :2551-2552, :2560-2571, :2572-2605, no SP, :2609-2648), :2003-2013,
    config/compilation.py:1136-1160, :1503-1508 (0.33.0).
    """
    _check_version(version)
    _check_int("max_num_seqs", max_num_seqs, 1)
    _check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
    _check_int("num_speculative_tokens", num_speculative_tokens, 0)
    _check_opt_level(optimization_level)
    if performance_mode not in _PERFORMANCE_MODES:
        raise ValueError(
            f"performance_mode must be one of {_PERFORMANCE_MODES}, got "
            f"{performance_mode!r}"
        )
    # SchedulerConfig would already have rejected this config:
    # config/scheduler.py:329 (0.31.0) / :328 (0.32.0) / :331 (0.33.0):
    # "self.max_num_batched_tokens < self.max_num_seqs"
    if max_num_batched_tokens < max_num_seqs:
        raise ValueError(
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be >= "
            f"max_num_seqs ({max_num_seqs})"
        )
    user_sizes = None
    if cudagraph_capture_sizes is not None:
        user_sizes = tuple(cudagraph_capture_sizes)
        if not user_sizes:
            # config/vllm.py:2551 (0.31.0) / :2455 (0.32.0) / :2561 (0.33.0):
            # "len(self.compilation_config.cudagraph_capture_sizes) > 0"
            raise ValueError("cudagraph_capture_sizes must contain at least one size")
        for s in user_sizes:
            _check_int("cudagraph_capture_sizes", s, 1)
    if max_cudagraph_capture_size is not None:
        _check_int("max_cudagraph_capture_size", max_cudagraph_capture_size, 0)
    mode = config_time_cudagraph_mode(
        version,
        enforce_eager=enforce_eager,
        requested=cudagraph_mode,
        optimization_level=optimization_level,
        breakable_cudagraph=breakable_cudagraph,
    )
    blackwell = tuple(device_capability)[0] == 10
    return _plan(version, max_num_seqs, max_num_batched_tokens,
                 num_speculative_tokens, mode, performance_mode, blackwell,
                 user_sizes, max_cudagraph_capture_size)


def default_cudagraph_capture_sizes(
    version: str,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    enforce_eager: bool = False,
    cudagraph_mode: str | None = None,
    performance_mode: str = "balanced",
    optimization_level: int = 2,
    breakable_cudagraph: bool | None = None,
    device_capability: tuple[int, int] = (9, 0),
    cudagraph_capture_sizes: list[int] | tuple[int, ...] | None = None,
    max_cudagraph_capture_size: int | None = None,
) -> list[int]:
    """Sorted ``compilation_config.cudagraph_capture_sizes`` [tokens].

    Thin wrapper over ``cudagraph_capture_plan`` (same rules, same citations:
    config/vllm.py:2388-2656 (0.31.0) / :2292-2550 (0.32.0) / :2398-2656
    (0.33.0)).  Returns a fresh list.
    """
    return list(cudagraph_capture_plan(
        version,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        num_speculative_tokens=num_speculative_tokens,
        enforce_eager=enforce_eager,
        cudagraph_mode=cudagraph_mode,
        performance_mode=performance_mode,
        optimization_level=optimization_level,
        breakable_cudagraph=breakable_cudagraph,
        device_capability=device_capability,
        cudagraph_capture_sizes=cudagraph_capture_sizes,
        max_cudagraph_capture_size=max_cudagraph_capture_size,
    ).cudagraph_capture_sizes)


def max_cudagraph_capture_size(version: str, **kwargs) -> int:
    """``compilation_config.max_cudagraph_capture_size`` [tokens] (0 = no graphs).

    Same keywords as ``default_cudagraph_capture_sizes``; always the last
    capture size (asserted by ``post_init_cudagraph_sizes``,
    config/compilation.py:1133-1136 (0.31.0) / :1150-1153 (0.32.0) /
    :1157-1160 (0.33.0)); written at config/vllm.py:2631 / :2525 / :2631.
    """
    return cudagraph_capture_plan(version, **kwargs).max_cudagraph_capture_size


# --------------------------------------------------------------------------
# compile ranges and warmup
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=65536)
def _ranges(version, B, user_endpoints):
    _check_version(version)
    endpoints = [B]  # tokens: upper bound of the last range
    for x in user_endpoints or ():
        if 1 < x < B:
            endpoints.append(x)  # tokens
    endpoints = sorted(set(endpoints))
    starts = [0] + endpoints[:-1]
    return tuple((s + 1, e) for s, e in zip(starts, endpoints))


def compile_ranges(
    version: str,
    *,
    max_num_batched_tokens: int,
    compile_ranges_endpoints: list[int] | tuple[int, ...] | None = None,
) -> list[tuple[int, int]]:
    """``compilation_config.get_compile_ranges()`` as inclusive (start, end) pairs.

    Endpoints = {B} plus user endpoints x with 1 < x < B (user x <= 0 is
    rejected).  At TP=1 on CUDA none of the automatic endpoints exist:
    allreduce+RMS fusion needs TP > 1, rope/QK-norm+KV-cache fusions are
    ROCm/AITER-only, the SP endpoint (0.31.0 only) needs enable_sp which is
    forced off at TP=1.  Ranges are (prev+1, e) over sorted unique endpoints,
    so the default is [(1, B)].  ``Range.__contains__`` is inclusive at both
    ends (config/utils.py:397-399 / :414-416 / :414-416).

    Cites: config/vllm.py:2658-2764 (user endpoints :2756-2763) + call :2062
    (0.31.0) / :2552-2627 (:2619-2626) + :2028 (0.32.0) / :2658-2733
    (:2725-2732) + :2104 (0.33.0); config/compilation.py:1583-1588 /
    :1560-1565 / :1567-1572.
    """
    _check_version(version)
    _check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
    user = None
    if compile_ranges_endpoints is not None:
        user = tuple(compile_ranges_endpoints)
        for x in user:
            # config/vllm.py:2759 (0.31.0) / :2622 (0.32.0) / :2728 (0.33.0):
            # "assert x > 0"
            _check_int("compile_ranges_endpoints", x, 1)
    return list(_ranges(version, max_num_batched_tokens, user))


def compile_warmup_sizes(
    version,
    *,
    max_num_batched_tokens: int | None = None,
    cudagraph_capture_sizes: list[int] | tuple[int, ...] | None = None,
    cudagraph_mode: str = "FULL_AND_PIECEWISE",
    compile_sizes: list[int | str] | tuple[int | str, ...] | None = None,
    compile_ranges_endpoints: list[int] | tuple[int, ...] | None = None,
    model_is_compiled: bool = False,
) -> list[int]:
    """Extra ``_dummy_run`` sizes [tokens] of ``compile_or_warm_up_model`` (run order).

    Only when the compilation mode is VLLM_COMPILE *and* the model has an
    active ``@support_torch_compile`` submodule (``model_is_compiled=True``);
    otherwise []. For DeepSeek-V3.2 on CUDA this is always [] in all three
    versions: vLLM auto-enables breakable CUDA graphs (compilation mode NONE)
    and, even with them off, ``DeepseekV32Model`` is not torch-compiled.

    When it does apply: start from ``compile_sizes`` (the string
    "cudagraph_capture_sizes" expands to the capture sizes; duplicates of the
    user list are dropped), drop those that are capture sizes when
    ``cudagraph_mode`` (the runner's final mode) is not NONE, then for every
    compile range that contains none of (capture sizes if mode != NONE) U
    (remaining warmup sizes), add the range end.  Run largest first.  With the
    default single range (1, B) and a non-empty capture list starting at 1 this
    is [].

    ``version`` may also be a prediction context (duck-typed: ``.knobs.
    vllm_version``, ``.sizes.max_num_batched_tokens``, ``.capture_sizes``,
    ``.cudagraph_mode``); its model is DeepSeek-V3.2, so the result is [].

    Cites: v1/worker/gpu_worker.py:829-866 (0.31.0) / :908-945 (0.32.0) /
    :933-938 wrapper + :940-977 (0.33.0); config/compilation.py:1112-1131
    (compile_sizes) / :1129-1148 / :1136-1155.
    """
    if not isinstance(version, str) and hasattr(version, "knobs"):
        ctx = version
        return compile_warmup_sizes(
            ctx.knobs.vllm_version,
            max_num_batched_tokens=ctx.sizes.max_num_batched_tokens,
            cudagraph_capture_sizes=tuple(ctx.capture_sizes),
            cudagraph_mode=ctx.cudagraph_mode,
        )
    _check_version(version)
    if max_num_batched_tokens is None or cudagraph_capture_sizes is None:
        raise ValueError(
            "max_num_batched_tokens and cudagraph_capture_sizes are required"
        )
    _check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
    mode = _norm_mode("cudagraph_mode", cudagraph_mode)
    if not model_is_compiled:
        return []
    capture = tuple(cudagraph_capture_sizes)
    warmup: list[int] = []
    if compile_sizes is not None:
        expanded: list[int] = []
        for x in set(compile_sizes):
            if isinstance(x, str):
                if x != "cudagraph_capture_sizes":
                    raise ValueError(
                        "compile_sizes entries must be ints or "
                        f"'cudagraph_capture_sizes', got {x!r}"
                    )
                expanded.extend(capture)  # tokens
            else:
                _check_int("compile_sizes", x, 1)
                expanded.append(x)  # tokens
        warmup = expanded
    cg = capture if mode != "NONE" else ()
    warmup = [x for x in warmup if x not in cg]  # tokens
    seen = set(cg) | set(warmup)
    for start, end in compile_ranges(
        version,
        max_num_batched_tokens=max_num_batched_tokens,
        compile_ranges_endpoints=compile_ranges_endpoints,
    ):
        if not any(start <= x <= end for x in seen):
            warmup.append(end)  # tokens: range end is warmed up
    return sorted(warmup, reverse=True)
