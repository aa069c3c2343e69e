"""Every knob the model takes, declared once, named exactly as vLLM names it.

A :class:`Knobs` value is one offline ``vllm.LLM(...)`` configuration of the fix
PR's tiny DeepSeek-V3.2 with HiSparse switched on (``reproduction.py``).  Each
field carries its help text and valid values as metadata (:func:`knob_specs`):
the command line's flags and every dashboard's controls are generated from
it, and :meth:`Knobs.__post_init__` validates against it.  Every rejection is a
``ValueError`` whose message starts with the knob's name, so a notebook or the
command line can show it as is.  Rules that depend on the vLLM version (what
vLLM itself rejects) live in ``versions.py``; rules that depend on the
resolved sizes live in ``plan.py``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import NamedTuple

from .kv_layout import KV_CACHE_DTYPES, QUANTIZED
from .reproduction import HOST_POOL_GIB
from .served_model import DEEPSEEK_V32, REPRODUCTION, model_of, served_model
from .versions import COVERED, candidate

VLLM_VERSIONS = COVERED + ((candidate(),) if candidate() else ())  # versions.py
ROUTING_MODES = ("stock", "fix")
# Sparse-MLA backends that serve DeepSeek-V3.2 on an H200 (SM90), in vLLM's
# priority order (vllm/platforms/cuda.py:138-153 `FLASH_ATTN_MLA_SPARSE`).  The
# SM90 FlashInfer sparse backend has no HiSparse path and the SM100 one is
# refused on SM90, so neither is offered.
ATTENTION_BACKENDS = ("FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE")
DEFAULT_ATTENTION_BACKEND = ATTENTION_BACKENDS[0]  # what vLLM picks on an H200


def picked_backend(kv_cache_dtype: str) -> str:
    """The backend vLLM picks on an H200: FLASH_ATTN_MLA_SPARSE, which serves bf16 only, or
    FLASHMLA_SPARSE for a quantized cache (kv_layout.py)."""
    return "FLASHMLA_SPARSE" if kv_cache_dtype in QUANTIZED else DEFAULT_ATTENTION_BACKEND
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
# DeepSeek-V3.2's longest context as vLLM derives it from the model config
# (max_position_embeddings 163840, no rope-scaling growth); a knob set's own model may say
# otherwise (served_model.py: max_position_embeddings).
MODEL_MAX_LEN = 163_840
MAX_GPUS = 8  # one H200 host: the largest tensor / data / pipeline parallel size offered
# the largest host pool: pinned host memory of the largest servers sold (32 TiB); past it a
# size in bytes stops being a finite float (1e300 GiB)
MAX_HOST_POOL_GIB = 32_768
# why a bound is where it is, said with the refusal
MAXIMUM_WHY = {MAX_GPUS: "the GPUs of one H200 host, the largest deployment the model covers",
               MAX_HOST_POOL_GIB: "32 TiB, the memory of the largest single servers: the "
                                  "pool is pinned host memory"}
H200_MEMORY_BYTES = 141 * 10**9  # NVIDIA's H200: 141 GB of HBM3e
BF16_BYTES = 2


def profiling_limit(hidden_size: int) -> int:
    """The largest B whose start-up memory profiling could fit an H200 at all.

    vLLM's profile run is one forward of ``max_num_batched_tokens`` tokens
    (vllm/v1/worker/gpu/model_runner.py:973-974 `self._dummy_run(`, ``max_num_tokens``
    being B, vllm/v1/worker/gpu/model_runner.py:216 `self.max_num_tokens =`); its hidden
    states alone are B x hidden_size bf16 values.  The model does not model GPU memory,
    so below this bound it cannot say whether profiling fits; above it nothing can.
    """
    return H200_MEMORY_BYTES // (hidden_size * BF16_BYTES)


class KnobSpec(NamedTuple):
    """What a control needs to know about one knob."""

    name: str
    kind: type  # int, bool or str
    default: object
    help: str
    choices: tuple | None = None  # allowed values (str knobs)
    minimum: int | None = None  # smallest allowed value (int knobs)
    maximum: int | None = None  # largest allowed value (int and float knobs)
    optional: bool = False  # None means "vLLM's default"
    cli_required: bool = False  # the command line insists on it


def _knob(default, help, *, kind=None, choices=None, minimum=None, maximum=None,
          optional=False, cli_required=False):
    meta = {"help": help, "kind": kind or type(default), "choices": choices,
            "minimum": minimum, "maximum": maximum, "optional": optional,
            "cli_required": cli_required}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Knobs:
    """One engine configuration. ``None`` means "vLLM's default for the offline LLM class"."""

    vllm_version: str = _knob("0.31.0", "vLLM release whose rules apply", choices=VLLM_VERSIONS)
    routing: str = _knob(
        "stock", "stock: vLLM's own routing; fix: 0.31.0 with the upstream fix's predicate",
        choices=ROUTING_MODES)
    max_num_seqs: int = _knob(2, "requests per engine step (S)", minimum=1, cli_required=True)
    max_model_len: int = _knob(320, "longest sequence, prompt + output, in tokens "
                               f"(at most {MODEL_MAX_LEN} for DeepSeek-V3.2)", minimum=1)
    max_num_batched_tokens: int | None = _knob(
        None, "tokens per engine step (B); default min(S * max_model_len, 16384)",
        kind=int, minimum=1, optional=True)
    num_speculative_tokens: int = _knob(0, "MTP draft tokens per step (K); 0 = no speculation",
                                        minimum=0)
    parallel_drafting: bool = _knob(False, "MTP parallel drafting (inert without K; "
                                            "Model Runner V2 refuses it with K >= 1)")
    enforce_eager: bool = _knob(False, "no CUDA graphs (and no JIT warmup)")
    cudagraph_mode: str | None = _knob(None, "CUDA-graph mode; default FULL_AND_PIECEWISE",
                                       kind=str, choices=CUDAGRAPH_MODES, optional=True)
    attention_backend: str = _knob(DEFAULT_ATTENTION_BACKEND, "sparse-MLA attention backend",
                                   choices=ATTENTION_BACKENDS)
    # vLLM's default for a decoder-only generate model: on
    # (vllm/engine/arg_utils.py:2956-2957 `self.enable_prefix_caching = default_prefix_caching`);
    # the fix PR's reproduction (and its recordings) turn it off.
    enable_prefix_caching: bool = _knob(
        True, "reuse cached full 64-token prompt blocks (vLLM's default: on)")
    # vllm/config/cache.py `num_gpu_blocks_override`: fixes the KV pool instead of
    # sizing it from the memory left after profiling (the H200 at 30 % leaves ~28,000
    # blocks, more than any start-up needs).  A small pool caps the JIT warmup's
    # request count (startup.py).
    num_gpu_blocks_override: int | None = _knob(
        None, "KV-cache blocks on the GPU; default: what memory profiling leaves",
        kind=int, minimum=1, optional=True)
    # The HiSparseConnector's kv_connector_extra_config["host_pool_gib"] (vLLM has no
    # default; the fix PR's reproduction gives 1): host_pool.py models its blocks and
    # vLLM's refusal of a pool too small for one max_model_len request.
    host_pool_gib: float = _knob(
        float(HOST_POOL_GIB), "HiSparse host pool in GiB (the HiSparseConnector's host_pool_gib)",
        kind=float, maximum=MAX_HOST_POOL_GIB)
    # Parallelism (vLLM's names; parallel.py models what each one changes).
    # max_num_seqs, B and the KV pool are per data-parallel rank.
    tensor_parallel_size: int = _knob(
        1, "GPUs per engine (-tp); C, W and the routing are the same on every rank",
        minimum=1, maximum=MAX_GPUS)
    data_parallel_size: int = _knob(
        1, "engines side by side (-dp), one scheduler each; a workload question (simulate)",
        minimum=1, maximum=MAX_GPUS)
    pipeline_parallel_size: int = _knob(1, "pipeline stages (HiSparse refuses > 1)",
                                        minimum=1, maximum=MAX_GPUS)
    decode_context_parallel_size: int = _knob(
        1, "decode context parallel ranks (HiSparse refuses > 1)", minimum=1, maximum=MAX_GPUS)
    # The served model (served_model.py): every count of blocks and bytes reads its config.
    model: str = _knob(
        REPRODUCTION, f"the served model's config: {REPRODUCTION} (the fix PR's tiny "
        f"DeepSeek-V3.2), {DEEPSEEK_V32} (the real one), or a local model directory")
    hf_overrides: str | None = _knob(
        None, "config keys to override, a JSON object (vllm serve --hf-overrides)", kind=str,
        optional=True)
    # vllm/config/cache.py:38-56 `CacheDType = Literal[`: the ones a sparse-MLA backend on an
    # H200 serves (kv_layout.py)
    kv_cache_dtype: str = _knob("auto", "KV-cache dtype: auto/bfloat16 (bf16 rows), fp8 or "
                                "fp8_ds_mla (656-byte rows, FLASHMLA_SPARSE)",
                                choices=KV_CACHE_DTYPES)

    def __post_init__(self) -> None:
        for spec in knob_specs():
            _check(spec, getattr(self, spec.name))
        served_model(self.model, self.hf_overrides)  # ValueError naming model / hf_overrides
        _check_dtype(self)
        _check_memory(self)
        if self.routing == "fix" and self.vllm_version != "0.31.0":
            raise ValueError(
                "routing='fix' patches the unfixed 0.31.0 only; "
                f"vllm_version {self.vllm_version} already routes on its own"
            )

    @property
    def spec_method(self) -> str | None:
        """The speculative method in force: ``mtp`` whenever tokens are speculated."""
        return "mtp" if self.num_speculative_tokens else None

    def replace(self, **changes) -> "Knobs":
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Knobs":
        """Build from a recording's or a user's dict, ignoring knobs this model does not take."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def knob_specs() -> tuple[KnobSpec, ...]:
    """The declaration of every knob, in field order."""
    return _SPECS


def _check_memory(k: Knobs) -> None:
    """Refuse what cannot fit an H200 at all (the model does not model GPU memory, so
    it says no more than that): start-up profiling of B tokens (:func:`profiling_limit`),
    and a KV pool of ``num_gpu_blocks_override`` blocks, which vLLM allocates whatever
    the memory (vllm/v1/core/kv_cache_utils.py:2764-2778 `adjusted_memory.append(override *
    bytes_per_block)`), each block holding 64 tokens of at least a byte each."""
    b, gb = k.max_num_batched_tokens, H200_MEMORY_BYTES // 10**9
    hidden = model_of(k).hidden_size
    if b is not None and b > profiling_limit(hidden):
        raise ValueError(
            f"max_num_batched_tokens must be <= {profiling_limit(hidden)}, got {b}: vLLM's "
            f"start-up memory profiling runs one forward of B tokens, whose hidden states "
            f"alone (B x {hidden} x {BF16_BYTES} bytes, {model_of(k).label}) would not "
            f"fit an H200's {gb} GB; the model does not model GPU memory, so it cannot say more")
    pool_limit = H200_MEMORY_BYTES // 64
    n = k.num_gpu_blocks_override
    if n is not None and n > pool_limit:
        raise ValueError(
            f"num_gpu_blocks_override must be <= {pool_limit}, got {n}: vLLM allocates every "
            f"block of the override, 64 tokens of KV cache each, which cannot fit an H200's "
            f"{gb} GB; the model does not model GPU memory, so it cannot say more")


def _check_dtype(k: Knobs) -> None:
    """FLASH_ATTN_MLA_SPARSE serves auto, float16 and bfloat16 only
    (vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:36-40 `"bfloat16",`); a quantized
    cache on an H200 is FLASHMLA_SPARSE's fp8_ds_mla (kv_layout.py)."""
    if k.kv_cache_dtype in QUANTIZED and k.attention_backend == "FLASH_ATTN_MLA_SPARSE":
        raise ValueError(f"kv_cache_dtype {k.kv_cache_dtype}: FLASH_ATTN_MLA_SPARSE serves auto "
                         "and bfloat16 only; vLLM serves a quantized cache with FLASHMLA_SPARSE "
                         "(set attention_backend FLASHMLA_SPARSE)")


def _check(spec: KnobSpec, value) -> None:
    if value is None and spec.optional:
        return
    if spec.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"{spec.name} must be an integer, got {value!r}")
    if spec.kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))
                               or not math.isfinite(value) or value <= 0):
        # the one float knob is an amount vLLM refuses unless positive
        # (vllm/config/kv_transfer.py:44-46 `host_pool_gib must be positive`)
        raise ValueError(f"{spec.name} must be a number > 0, got {value!r}")
    if spec.kind is bool and not isinstance(value, bool):
        raise ValueError(f"{spec.name} must be true or false, got {value!r}")
    if spec.choices is not None and value not in spec.choices:
        raise ValueError(f"{spec.name} must be one of {', '.join(spec.choices)}, got {value!r}")
    if spec.minimum is not None and value < spec.minimum:
        raise ValueError(f"{spec.name} must be >= {spec.minimum}, got {value}")
    if spec.maximum is not None and value > spec.maximum:
        why = f" ({MAXIMUM_WHY[spec.maximum]})" if spec.maximum in MAXIMUM_WHY else ""
        raise ValueError(f"{spec.name} must be <= {spec.maximum}{why}, got {value}")


_SPECS = tuple(
    KnobSpec(f.name, f.metadata["kind"], f.default, f.metadata["help"], f.metadata["choices"],
             f.metadata["minimum"], f.metadata["maximum"], f.metadata["optional"],
             f.metadata["cli_required"])
    for f in fields(Knobs)
)
