"""The engine knobs the model takes, named exactly as vLLM names them.

A :class:`Knobs` value is one offline ``vllm.LLM(...)`` configuration of the fix
PR's tiny DeepSeek-V3.2 with HiSparse switched on (shared/upstream-fix-pr.md).
Validation happens once, in :meth:`Knobs.__post_init__`, and every rejection is
a ``ValueError`` whose message starts with the knob's name, so a notebook or the
command line can show it as is.

What HiSparse makes inert: ``attention_config.hisparse_config`` forces the V2
model runner (``config/vllm.py:701-710`` in 0.31.0, ``703-710`` in 0.32.0,
``731-738`` in 0.33.0), so ``parallel_drafting`` no longer widens
``max_decode_query_len`` (``v1/attention/backend.py:579-596`` in 0.31.0: the
``+ num_speculative_tokens`` term applies to the V1 runner only).  The knob is
still accepted, so users can see that it changes nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

VLLM_VERSIONS = ("0.31.0", "0.32.0", "0.33.0")

# Sparse-MLA attention backends that can serve DeepSeek-V3.2 on an H200 (SM90).
# Priority on SM90 (platforms/cuda.py:138-153, 0.31.0): FLASH_ATTN_MLA_SPARSE,
# then FLASHMLA_SPARSE, then FLASHINFER_MLA_SPARSE_SM90 (first only for head_size 512).
ATTENTION_BACKENDS = (
    "FLASH_ATTN_MLA_SPARSE",
    "FLASHMLA_SPARSE",
)
# FLASHINFER_MLA_SPARSE_SM90 (v1/attention/backends/mla/flashinfer_mla_sparse_sm90.py)
# has no HiSparse path at all, and the SM100 FLASHINFER_MLA_SPARSE is refused on
# SM90 (platforms/cuda.py:448-464), so neither is offered here.
DEFAULT_ATTENTION_BACKEND = "FLASH_ATTN_MLA_SPARSE"

CUDAGRAPH_MODES = (
    "NONE",
    "PIECEWISE",
    "FULL",
    "FULL_DECODE_ONLY",
    "FULL_AND_PIECEWISE",
)

SPECULATIVE_METHODS = ("mtp",)

# "stock" runs vLLM's own routing; "fix" applies the upstream fix's routing
# predicate (compare with the swap capacity) on top of an unfixed 0.31.0.
ROUTING_MODES = ("stock", "fix")

# The fix PR's reproduction (shared/upstream-fix-pr.md): max_model_len=320.
DEFAULT_MAX_MODEL_LEN = 320


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class Knobs:
    """One engine configuration. ``None`` means "vLLM's default for the offline LLM class"."""

    vllm_version: str = "0.31.0"
    max_num_seqs: int = 2
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    max_num_batched_tokens: int | None = None
    num_speculative_tokens: int = 0
    speculative_method: str | None = None
    parallel_drafting: bool = False
    enforce_eager: bool = False
    cudagraph_mode: str | None = None
    attention_backend: str = DEFAULT_ATTENTION_BACKEND
    routing: str = "stock"
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.vllm_version not in VLLM_VERSIONS:
            raise ValueError(
                f"vllm_version must be one of {', '.join(VLLM_VERSIONS)}, "
                f"got {self.vllm_version!r}"
            )
        _check_int("max_num_seqs", self.max_num_seqs, 1)
        _check_int("max_model_len", self.max_model_len, 1)
        if self.max_num_batched_tokens is not None:
            _check_int("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        _check_int("num_speculative_tokens", self.num_speculative_tokens, 0)
        if self.speculative_method is not None and (
            self.speculative_method not in SPECULATIVE_METHODS
        ):
            raise ValueError(
                f"speculative_method must be one of {SPECULATIVE_METHODS}, "
                f"got {self.speculative_method!r}"
            )
        if self.speculative_method is not None and self.num_speculative_tokens == 0:
            raise ValueError(
                "num_speculative_tokens must be >= 1 when speculative_method "
                f"is {self.speculative_method!r}"
            )
        if self.parallel_drafting and self.num_speculative_tokens == 0:
            raise ValueError(
                "parallel_drafting needs num_speculative_tokens >= 1 "
                "(it is a speculative-decoding option)"
            )
        if self.cudagraph_mode is not None and self.cudagraph_mode not in CUDAGRAPH_MODES:
            raise ValueError(
                f"cudagraph_mode must be one of {', '.join(CUDAGRAPH_MODES)}, "
                f"got {self.cudagraph_mode!r}"
            )
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(
                f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}, "
                f"got {self.attention_backend!r}"
            )
        if self.routing not in ROUTING_MODES:
            raise ValueError(
                f"routing must be one of {ROUTING_MODES}, got {self.routing!r}"
            )
        if self.routing == "fix" and self.vllm_version != "0.31.0":
            raise ValueError(
                "routing='fix' patches the unfixed 0.31.0 only; "
                f"vllm_version {self.vllm_version} already routes on its own"
            )

    @property
    def spec_method(self) -> str | None:
        """The speculative method in force: ``mtp`` whenever tokens are speculated."""
        if self.num_speculative_tokens == 0:
            return None
        return self.speculative_method or "mtp"

    def replace(self, **changes) -> "Knobs":
        return replace(self, **changes)

    def as_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        return d
