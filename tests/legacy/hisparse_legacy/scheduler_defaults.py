"""Scheduler batch-size defaults of vLLM 0.31.0 / 0.32.0 / 0.33.0 (pure Python).

Models how ``vllm.LLM(...)`` (usage context ``LLM_CLASS``) on one NVIDIA H200
arrives at ``scheduler_config.max_num_seqs`` and
``scheduler_config.max_num_batched_tokens``, and which combinations vLLM
rejects.  Scope: CUDA, TP=1, PP=1, DP=1, no LoRA, text-only decoder
(DeepSeek-V3.2, generate runner), HiSparse on (Model Runner V2).

Pipeline in vLLM (all three versions have the same shape):

1. ``EngineArgs.create_engine_config`` resolves ``enable_chunked_prefill``
   (default = ``ModelConfig.is_chunked_prefill_supported``, True for a
   generative decoder-only model),
2. then ``_set_default_max_num_seqs_and_batched_tokens_args`` fills the unset
   knobs from a table keyed on usage context and GPU memory
   (``get_batch_defaults``),
3. then ``SchedulerConfig.__post_init__`` -> ``verify_max_model_len`` validates,
4. then ``VllmConfig.__post_init__`` -> ``_set_max_num_scheduled_tokens``
   validates the spec-decode slot budget.  Nothing later in
   ``VllmConfig.__post_init__`` rewrites ``max_num_batched_tokens`` or
   ``max_num_seqs`` (no spec-decode raise, no raise to ``max_model_len``; the
   only raise-to-``max_model_len`` is step 2, and only for defaulted values).

Version table (only rows that differ; everything else is identical):

=========================  ===========  ===========  =======================
rule                       0.31.0       0.32.0       0.33.0
=========================  ===========  ===========  =======================
GB10 (cc 12.1) forced to   no           no           yes (irrelevant: H200
the small default tier                               is cc 9.0)
spec-decode slot check     B > max_num_new_slots_for_drafting (MTP/EAGLE:
                           0, draft_model: 1)        B > num_lookahead_tokens
                                                     (MTP/EAGLE/draft_model:
                                                     k, ngram: 0)
``max_num_scheduled_       ge=0         ge=1         ge=1
tokens`` field bound
=========================  ===========  ===========  =======================

All line numbers below are ``vllm/<path>:<line>`` in the unzipped sources
(/work/vsrc/src-<version>/vllm).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

__all__ = [
    "SUPPORTED_VERSIONS",
    "H200_TOTAL_MEMORY_BYTES",
    "H200_DEVICE_NAME",
    "H200_DEVICE_CAPABILITY",
    "SchedulerSizes",
    "batch_defaults",
    "default_enable_chunked_prefill",
    "default_max_num_batched_tokens",
    "default_max_num_seqs",
    "resolve_scheduler_sizes",
    "resolved_max_num_batched_tokens",
    "validate_scheduler_config",
    "check_version",
]

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.31.0", "0.32.0", "0.33.0")

GiB_BYTES = 1 << 30  # bytes per GiB (vllm.utils.mem_constants.GiB_bytes)

# NVML total memory of an H200 "141 GB" board: 143771 MiB (nvidia-smi)
# = 150_754_820_096 bytes ~= 140.4 GiB.  Unit: bytes.  vLLM reads
# pynvml.nvmlDeviceGetMemoryInfo(handle).total (platforms/cuda.py:821-824 in
# 0.31.0) or torch total_memory; either lands in the [70 GiB, 160 GiB) tier,
# which is all that matters.
H200_TOTAL_MEMORY_BYTES = 143_771 * (1 << 20)  # bytes
H200_DEVICE_NAME = "NVIDIA H200"
H200_DEVICE_CAPABILITY = (9, 0)  # (major, minor) SM version

_USAGE_CONTEXTS = (
    "LLM_CLASS",
    "OPENAI_API_SERVER",
    "API_SERVER",
    "OPENAI_BATCH_RUNNER",
    "ENGINE_CONTEXT",
    "UNKNOWN_CONTEXT",
    None,
)
_PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")

# SchedulerConfig class constants, identical in all three versions
# (config/scheduler.py:42,44 (0.31.0) / :41,43 (0.32.0) / :41,43 (0.33.0)).
_SCHED_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # tokens / step, fallback
_SCHED_DEFAULT_MAX_NUM_SEQS = 128  # requests / step, fallback

# Speculative methods modelled for the slot check.  Value = (new slots for
# drafting per request, lookahead slots per request as multiple of k).
#   max_num_new_slots_for_drafting: config/speculative.py:1882-1920 (0.31.0) /
#   :1888-1926 (0.32.0); num_lookahead_tokens: config/vllm.py:626-652 (0.33.0).
#   Only non-parallel drafters are modelled (parallel drafting, DFlash, DSpark
#   are rejected with ValueError naming speculative_method).
_SPEC_METHODS = {
    # method: (new_slots_for_drafting [tokens/request],
    #          lookahead_is_k [bool: num_lookahead_tokens == k else 0])
    "mtp": (0, True),
    "eagle": (0, True),
    "eagle3": (0, True),
    "ngram": (0, False),
    "draft_model": (1, True),
}


class _VersionRules(NamedTuple):
    gb10_small_tier: bool  # GB10 excluded from the >=70 GiB tier
    spec_check_uses_lookahead: bool  # 0.33.0: B > num_lookahead_tokens


_VERSION_RULES = {
    # get_batch_defaults: engine/arg_utils.py:2829-2920 (no GB10 clause)
    # _set_max_num_scheduled_tokens: config/vllm.py:2350-2386 (new-slots check)
    "0.31.0": _VersionRules(gb10_small_tier=False, spec_check_uses_lookahead=False),
    # get_batch_defaults: engine/arg_utils.py:2894-2985 (no GB10 clause)
    # _set_max_num_scheduled_tokens: config/vllm.py:2254-2290 (new-slots check)
    "0.32.0": _VersionRules(gb10_small_tier=False, spec_check_uses_lookahead=False),
    # get_batch_defaults: engine/arg_utils.py:2940-3039 (GB10 at :2963, :2984-2988)
    # _set_max_num_scheduled_tokens: config/vllm.py:2341-2396 (lookahead check)
    "0.33.0": _VersionRules(gb10_small_tier=True, spec_check_uses_lookahead=True),
}


class SchedulerSizes(NamedTuple):
    """Resolved scheduler sizing knobs (what SchedulerConfig ends up holding)."""

    max_num_seqs: int  # requests per step
    max_num_batched_tokens: int  # tokens per step (B)
    enable_chunked_prefill: bool
    max_num_scheduled_tokens: int  # tokens per step the scheduler may issue


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def check_version(version: str) -> _VersionRules:
    """Return the rule row for ``version``; anything else is a ValueError.

    Supported: "0.31.0", "0.32.0", "0.33.0" (sources in
    /work/vsrc/src-<version>/vllm; rules cited per function).
    """
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


def _check_spec(num_speculative_tokens, speculative_method):
    _check_int("num_speculative_tokens", num_speculative_tokens, 0)
    if num_speculative_tokens == 0:
        if speculative_method is not None:
            raise ValueError(
                "num_speculative_tokens must be >= 1 when speculative_method "
                f"({speculative_method!r}) is set"
            )
        return None
    method = "mtp" if speculative_method is None else speculative_method
    if method not in _SPEC_METHODS:
        raise ValueError(
            f"speculative_method must be one of {tuple(_SPEC_METHODS)} "
            f"(non-parallel drafters only), got {speculative_method!r}"
        )
    return method


# --------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------


def default_enable_chunked_prefill(version: str) -> bool:
    """Default ``enable_chunked_prefill`` for DeepSeek-V3.2 (generate runner).

    ``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args`` sets it
    to ``ModelConfig.is_chunked_prefill_supported`` when the user left it
    ``None``; for a non-pooling model that is ``attn_type != "encoder_decoder"``
    i.e. True.  Nothing on CUDA turns it off for this model (the engine core
    only disables it for models without KV cache / non-causal layers).

    Cites: engine/arg_utils.py:2922-2990 (set at :2929), config/model.py:2132-2175
    (0.31.0) / engine/arg_utils.py:2987-3055 (:2994), config/model.py:2175-2218
    (0.32.0) / engine/arg_utils.py:3041-3109 (:3048), config/model.py:2193-2236
    (0.33.0).
    """
    check_version(version)
    return True  # bool: chunked prefill on by default


def batch_defaults(
    version: str,
    *,
    usage_context: str | None = "LLM_CLASS",
    gpu_memory_bytes: int = H200_TOTAL_MEMORY_BYTES,
    device_name: str = H200_DEVICE_NAME,
    device_capability: tuple[int, int] = H200_DEVICE_CAPABILITY,
) -> tuple[int, int]:
    """Table defaults ``(max_num_batched_tokens, max_num_seqs)`` before clamping.

    ``EngineArgs.get_batch_defaults`` picks a tier by total GPU memory:

    * ``>= 160 GiB`` (B200/B300): LLM_CLASS 16384 tokens / 1024 seqs,
      OPENAI_API_SERVER 16384 / 1024;
    * ``>= 70 GiB`` and ``"a100"`` not in the lower-cased device name (and, in
      0.33.0 only, not GB10 = cc 12.1): LLM_CLASS 16384 / 1024,
      OPENAI_API_SERVER 8192 / 1024   <- the H200 (~140.4 GiB) lands here;
    * otherwise: LLM_CLASS 8192 / 256, OPENAI_API_SERVER 2048 / 256.

    Any other usage context (``None``, ENGINE_CONTEXT, ...) falls back to
    ``SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS`` = 2048 and
    ``DEFAULT_MAX_NUM_SEQS`` = 128 (``dict.get`` fallback).  TPU/CPU rows are not
    modelled (CUDA only).  So yes: GPU memory matters (tiers), device name
    matters only for A100; for the H200 the answer is 16384 / 1024.

    Cites: engine/arg_utils.py:2829-2920 (tiers :2858, :2868), :3047-3062
    (fallback) (0.31.0) / engine/arg_utils.py:2894-2985 (:2923, :2933),
    :3112-3127 (0.32.0) / engine/arg_utils.py:2940-3039 (GB10 :2963, tiers
    :2973, :2983-2988), :3166-3181 (0.33.0); config/scheduler.py:42,44 /
    :41,43 / :41,43.
    """
    return _batch_defaults(version, usage_context, gpu_memory_bytes, device_name,
                           tuple(device_capability))


@functools.lru_cache(maxsize=4096)
def _batch_defaults(version, usage_context, gpu_memory_bytes, device_name,
                    device_capability):
    rules = check_version(version)
    if usage_context not in _USAGE_CONTEXTS:
        raise ValueError(
            f"usage_context must be one of {_USAGE_CONTEXTS}, got {usage_context!r}"
        )
    _check_int("gpu_memory_bytes", gpu_memory_bytes, 0)
    if not isinstance(device_name, str):
        raise ValueError(f"device_name must be a str, got {device_name!r}")
    is_gb10 = rules.gb10_small_tier and device_capability == (12, 1)
    name = device_name.lower()
    if gpu_memory_bytes >= 160 * GiB_BYTES:  # bytes
        tokens = {"LLM_CLASS": 16384, "OPENAI_API_SERVER": 16384}  # tokens/step
        seqs = {"LLM_CLASS": 1024, "OPENAI_API_SERVER": 1024}  # requests/step
    elif gpu_memory_bytes >= 70 * GiB_BYTES and "a100" not in name and not is_gb10:
        tokens = {"LLM_CLASS": 16384, "OPENAI_API_SERVER": 8192}  # tokens/step
        seqs = {"LLM_CLASS": 1024, "OPENAI_API_SERVER": 1024}  # requests/step
    else:
        tokens = {"LLM_CLASS": 8192, "OPENAI_API_SERVER": 2048}  # tokens/step
        seqs = {"LLM_CLASS": 256, "OPENAI_API_SERVER": 256}  # requests/step
    return (
        tokens.get(usage_context, _SCHED_DEFAULT_MAX_NUM_BATCHED_TOKENS),
        seqs.get(usage_context, _SCHED_DEFAULT_MAX_NUM_SEQS),
    )


def resolve_scheduler_sizes(
    version: str,
    *,
    max_model_len: int,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    enable_chunked_prefill: bool | None = None,
    num_speculative_tokens: int = 0,
    speculative_method: str | None = None,
    max_num_active_seqs: int | None = None,
    usage_context: str | None = "LLM_CLASS",
    performance_mode: str = "balanced",
    gpu_memory_bytes: int = H200_TOTAL_MEMORY_BYTES,
    device_name: str = H200_DEVICE_NAME,
    device_capability: tuple[int, int] = H200_DEVICE_CAPABILITY,
) -> SchedulerSizes:
    """Resolve (max_num_seqs, max_num_batched_tokens, chunked prefill, ...).

    ``None`` for ``max_num_seqs`` / ``max_num_batched_tokens`` /
    ``enable_chunked_prefill`` means "not passed to ``vllm.LLM``".

    Defaulting (``_set_default_max_num_seqs_and_batched_tokens_args``), with
    T, S = ``batch_defaults(...)`` [tokens/step, requests/step]:

    1. unset B := T; unset max_num_seqs := S (the table value, used below);
    2. ``performance_mode == "throughput"``: each *unset* knob doubles;
    3. only if B was unset: if chunked prefill is off, B := max(max_model_len,
       B); then B := min(max_num_seqs * max_model_len, B)  (max_num_seqs is the
       user value if given, else the table value);
    4. only if max_num_seqs was unset: max_num_seqs := min(max_num_seqs, B).

    No step touches B for speculative decoding (the spec-decode path only
    *validates*, see ``validate_scheduler_config``).  ``max_num_scheduled_tokens``
    stays ``None`` -> B without spec decode, and is set to B with spec decode
    (``_set_max_num_scheduled_tokens``), i.e. always equals B here.

    Ground truth (0.31.0 live, H200, LLM_CLASS): max_num_seqs=2,
    max_model_len=320 -> B = min(2*320, 16384) = 640.

    Cites: engine/arg_utils.py:3032-3124 (raise-to-max_model_len :3075-3080,
    clamp :3102-3105, seqs clamp :3113-3115) (0.31.0) / engine/arg_utils.py:
    3097-3189 (:3140, :3167-3170, :3178-3180) (0.32.0) / engine/arg_utils.py:
    3151-3243 (:3194, :3221-3224, :3232-3234) (0.33.0); call order
    create_engine_config :2189 then :2534 / :2246 then :2601 / :2286 then :2642;
    config/vllm.py:2350-2386 / 2254-2290 / 2341-2396 (scheduled tokens).
    """
    return _resolve(
        version, max_model_len, max_num_seqs, max_num_batched_tokens,
        enable_chunked_prefill, num_speculative_tokens, speculative_method,
        max_num_active_seqs, usage_context, performance_mode, gpu_memory_bytes,
        device_name, tuple(device_capability),
    )


@functools.lru_cache(maxsize=65536)
def _resolve(version, max_model_len, max_num_seqs, max_num_batched_tokens,
             enable_chunked_prefill, num_speculative_tokens, speculative_method,
             max_num_active_seqs, usage_context, performance_mode,
             gpu_memory_bytes, device_name, device_capability) -> SchedulerSizes:
    check_version(version)
    _check_int("max_model_len", max_model_len, 1)
    if max_num_seqs is not None:
        _check_int("max_num_seqs", max_num_seqs, 1)
    if max_num_batched_tokens is not None:
        _check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
    if enable_chunked_prefill is not None and not isinstance(
        enable_chunked_prefill, bool
    ):
        raise ValueError(
            f"enable_chunked_prefill must be a bool or None, got "
            f"{enable_chunked_prefill!r}"
        )
    if performance_mode not in _PERFORMANCE_MODES:
        raise ValueError(
            f"performance_mode must be one of {_PERFORMANCE_MODES}, got "
            f"{performance_mode!r}"
        )
    _check_spec(num_speculative_tokens, speculative_method)

    chunked = (
        default_enable_chunked_prefill(version)
        if enable_chunked_prefill is None
        else enable_chunked_prefill
    )
    table_tokens, table_seqs = batch_defaults(
        version,
        usage_context=usage_context,
        gpu_memory_bytes=gpu_memory_bytes,
        device_name=device_name,
        device_capability=device_capability,
    )
    seqs = table_seqs if max_num_seqs is None else max_num_seqs  # requests/step
    tokens = (  # tokens/step
        table_tokens if max_num_batched_tokens is None else max_num_batched_tokens
    )
    if performance_mode == "throughput":
        if max_num_batched_tokens is None:
            tokens *= 2  # tokens/step
        if max_num_seqs is None:
            seqs *= 2  # requests/step
    if max_num_batched_tokens is None:
        if not chunked:
            tokens = max(max_model_len, tokens)  # tokens/step
        tokens = min(seqs * max_model_len, tokens)  # tokens/step
    if max_num_seqs is None:
        seqs = min(seqs, tokens)  # requests/step

    validate_scheduler_config(
        version,
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        max_num_active_seqs=max_num_active_seqs,
        num_speculative_tokens=num_speculative_tokens,
        speculative_method=speculative_method,
    )
    return SchedulerSizes(
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        enable_chunked_prefill=chunked,
        max_num_scheduled_tokens=tokens,  # tokens/step (== B, see docstring)
    )


def validate_scheduler_config(
    version: str,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    max_model_len: int,
    enable_chunked_prefill: bool = True,
    max_num_active_seqs: int | None = None,
    num_speculative_tokens: int = 0,
    speculative_method: str | None = None,
) -> None:
    """Raise ValueError for final scheduler values vLLM rejects (else None).

    Rules (identical text in all three versions unless noted):

    * pydantic bounds: ``max_num_batched_tokens >= 1``, ``max_num_seqs >= 1``,
      ``max_num_active_seqs >= 1``;
    * ``max_num_batched_tokens < max_model_len and not enable_chunked_prefill``
      -> error.  So yes, vLLM validates B >= max_model_len, but only when
      chunked prefill is disabled (it is enabled by default here); a *defaulted*
      B is first raised to max_model_len so only an explicit B can trip it;
    * ``max_num_batched_tokens < max_num_seqs`` -> error (always);
    * ``max_num_active_seqs > max_num_seqs`` -> error;
    * spec decode (k = num_speculative_tokens > 0): 0.31.0/0.32.0 reject
      ``B <= max_num_new_slots_for_drafting`` (0 for MTP/EAGLE/ngram, 1 for
      draft_model); 0.33.0 rejects ``B <= num_lookahead_tokens`` (k for
      MTP/EAGLE/draft_model, 0 for ngram).

    Cites: config/scheduler.py:49,63 (Field ge=1), :315-360 (0.31.0) /
    :48,62, :314-359 (0.32.0) / :48,62, :317-362 (0.33.0);
    config/vllm.py:2381 (0.31.0) / :2285 (0.32.0) / :2371 (0.33.0).
    """
    rules = check_version(version)
    _check_int("max_num_batched_tokens", max_num_batched_tokens, 1)
    _check_int("max_num_seqs", max_num_seqs, 1)
    _check_int("max_model_len", max_model_len, 1)
    if max_num_active_seqs is not None:
        _check_int("max_num_active_seqs", max_num_active_seqs, 1)
    method = _check_spec(num_speculative_tokens, speculative_method)

    # config/scheduler.py:316-319 (0.31.0) / :315-318 (0.32.0) / :318-321
    # (0.33.0): "self.max_num_batched_tokens < max_model_len and not
    # self.enable_chunked_prefill"
    if max_num_batched_tokens < max_model_len and not enable_chunked_prefill:
        raise ValueError(
            f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than "
            f"max_model_len ({max_model_len}) with enable_chunked_prefill=False"
        )
    # config/scheduler.py:329 (0.31.0) / :328 (0.32.0) / :331 (0.33.0):
    # "self.max_num_batched_tokens < self.max_num_seqs"
    if max_num_batched_tokens < max_num_seqs:
        raise ValueError(
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be >= "
            f"max_num_seqs ({max_num_seqs})"
        )
    # config/scheduler.py:336-339 (0.31.0) / :335-338 (0.32.0) / :338-341
    # (0.33.0): "self.max_num_active_seqs > self.max_num_seqs"
    if max_num_active_seqs is not None and max_num_active_seqs > max_num_seqs:
        raise ValueError(
            f"max_num_active_seqs ({max_num_active_seqs}) cannot be greater "
            f"than max_num_seqs ({max_num_seqs})"
        )
    if method is not None:
        new_slots, lookahead_is_k = _SPEC_METHODS[method]
        if rules.spec_check_uses_lookahead:
            # config/vllm.py:2371 (0.33.0):
            # "max_num_batched_tokens <= self.num_lookahead_tokens"
            reserved = num_speculative_tokens if lookahead_is_k else 0  # tokens
        else:
            # config/vllm.py:2381 (0.31.0) / :2285 (0.32.0):
            # "max_num_batched_tokens <= scheduled_token_delta"
            reserved = new_slots  # tokens
        if max_num_batched_tokens <= reserved:
            raise ValueError(
                f"max_num_batched_tokens ({max_num_batched_tokens}) must exceed "
                f"the {reserved} speculative-decoding slots ({method}, "
                f"num_speculative_tokens={num_speculative_tokens})"
            )


def default_max_num_batched_tokens(
    version: str,
    *,
    max_num_seqs: int | None,
    max_model_len: int,
    enable_chunked_prefill: bool | None = None,
    num_speculative_tokens: int = 0,
    speculative_method: str | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_active_seqs: int | None = None,
    usage_context: str | None = "LLM_CLASS",
    performance_mode: str = "balanced",
    gpu_memory_bytes: int = H200_TOTAL_MEMORY_BYTES,
    device_name: str = H200_DEVICE_NAME,
    device_capability: tuple[int, int] = H200_DEVICE_CAPABILITY,
) -> int:
    """Final ``scheduler_config.max_num_batched_tokens`` [tokens/step].

    ``max_num_seqs=None`` means the user did not set it (table default 1024 on
    the H200 is then used in the clamp).  Passing ``max_num_batched_tokens``
    returns it unchanged after validation.  See ``resolve_scheduler_sizes`` for
    the rule; e.g. H200 LLM_CLASS: ``min(max_num_seqs * max_model_len, 16384)``
    with chunked prefill on (default), ``min(max_num_seqs * max_model_len,
    max(max_model_len, 16384))`` with it off.

    Cites: engine/arg_utils.py:3032-3124 (0.31.0) / :3097-3189 (0.32.0) /
    :3151-3243 (0.33.0); config/scheduler.py:315-360 / :314-359 / :317-362.
    """
    return resolve_scheduler_sizes(
        version,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_chunked_prefill=enable_chunked_prefill,
        num_speculative_tokens=num_speculative_tokens,
        speculative_method=speculative_method,
        max_num_active_seqs=max_num_active_seqs,
        usage_context=usage_context,
        performance_mode=performance_mode,
        gpu_memory_bytes=gpu_memory_bytes,
        device_name=device_name,
        device_capability=tuple(device_capability),
    ).max_num_batched_tokens


def default_max_num_seqs(
    version: str,
    *,
    max_model_len: int,
    max_num_batched_tokens: int | None = None,
    enable_chunked_prefill: bool | None = None,
    num_speculative_tokens: int = 0,
    speculative_method: str | None = None,
    usage_context: str | None = "LLM_CLASS",
    performance_mode: str = "balanced",
    gpu_memory_bytes: int = H200_TOTAL_MEMORY_BYTES,
    device_name: str = H200_DEVICE_NAME,
    device_capability: tuple[int, int] = H200_DEVICE_CAPABILITY,
) -> int:
    """Final ``scheduler_config.max_num_seqs`` [requests/step] when unset by user.

    Table value (1024 for LLM_CLASS on an H200 in all three versions; doubled
    in ``performance_mode="throughput"``) clamped to the resolved
    ``max_num_batched_tokens``: ``min(1024, B)``.

    Cites: engine/arg_utils.py:2865,2875 (table), :3058-3062, :3113-3115
    (0.31.0) / :2930,2940, :3123-3127, :3178-3180 (0.32.0) / :2980,2994,
    :3177-3181, :3232-3234 (0.33.0).
    """
    return resolve_scheduler_sizes(
        version,
        max_model_len=max_model_len,
        max_num_seqs=None,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_chunked_prefill=enable_chunked_prefill,
        num_speculative_tokens=num_speculative_tokens,
        speculative_method=speculative_method,
        usage_context=usage_context,
        performance_mode=performance_mode,
        gpu_memory_bytes=gpu_memory_bytes,
        device_name=device_name,
        device_capability=tuple(device_capability),
    ).max_num_seqs


def resolved_max_num_batched_tokens(knobs) -> int:
    """Adapter: final B [tokens/step] for a knobs object (duck-typed).

    Reads ``vllm_version``, ``max_num_seqs``, ``max_model_len`` and, when
    present, ``max_num_batched_tokens``, ``enable_chunked_prefill``,
    ``num_speculative_tokens``, ``speculative_method`` /
    ``spec_method``; everything else keeps the H200 / LLM_CLASS defaults.
    Same rules and citations as ``resolve_scheduler_sizes``
    (engine/arg_utils.py:3032-3124 (0.31.0) / :3097-3189 (0.32.0) /
    :3151-3243 (0.33.0)).
    """
    k = getattr(knobs, "num_speculative_tokens", 0) or 0
    method = getattr(knobs, "speculative_method", None)
    if method is None and k:
        method = getattr(knobs, "spec_method", None)
    return resolve_scheduler_sizes(
        knobs.vllm_version,
        max_model_len=knobs.max_model_len,
        max_num_seqs=knobs.max_num_seqs,
        max_num_batched_tokens=getattr(knobs, "max_num_batched_tokens", None),
        enable_chunked_prefill=getattr(knobs, "enable_chunked_prefill", None),
        num_speculative_tokens=k,
        speculative_method=method if k else None,
    ).max_num_batched_tokens
