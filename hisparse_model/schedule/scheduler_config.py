"""What the scheduler model reads: :class:`SchedulerConfig`, built from the knobs and plan by
:func:`scheduler_config`, and the MTP acceptance input (:func:`acceptance`).

The scheduler (``scheduler.py``) reads nothing else of the knobs: B from the plan,
S, max_model_len, K, prefix caching and the version from the knobs, the block size
of the fix PR's model (``reproduction.BLOCK_SIZE``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..model.knobs import VLLM_VERSIONS, Knobs
from ..model.plan import Plan
from ..model.reproduction import BLOCK_SIZE

VERSIONS = VLLM_VERSIONS


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int = 320
    num_speculative_tokens: int = 0
    enable_prefix_caching: bool = True
    block_size: int = 64
    num_gpu_blocks: int = 8192  # the pool the model assumes never binds
    async_scheduling: bool = True
    vllm_version: str = "0.31.0"

    def __post_init__(self) -> None:
        for bad, why in ((self.vllm_version not in VERSIONS, f"vllm_version in {VERSIONS}"),
                         (not 1 <= self.max_num_seqs <= self.max_num_batched_tokens,
                          "1 <= max_num_seqs <= max_num_batched_tokens"),
                         (self.block_size != 64, "block_size=64 (the only one modelled)")):
            if bad:
                raise ValueError(f"SchedulerConfig needs {why}: {self}")


def acceptance(spec=None):
    """The MTP acceptance input as ``f(step, request, num_drafts) -> accepted``: ``None``
    (0), an int n (min(n, drafts)), ``"all"``, a callable, ``{"seed": s}`` (fixed
    pseudo-random 0..drafts) or ``{"table": {"step:request": n}}`` (e.g. recorded)."""
    if spec is None or callable(spec) or spec == "all":
        return spec if callable(spec) else (lambda s, r, d: d if spec else 0)
    if isinstance(spec, int) and not isinstance(spec, bool):
        return lambda s, r, d: min(spec, d)
    if isinstance(spec, dict) and set(spec) == {"seed"}:
        seed = str(spec["seed"]).encode()
        return lambda s, r, d: int.from_bytes(hashlib.blake2b(
            b"%s:%d:%d" % (seed, s, r), digest_size=4).digest(), "little") % (d + 1)
    if isinstance(spec, dict) and set(spec) == {"table"}:
        table = {tuple(int(x) for x in k.split(":")): int(n) for k, n in spec["table"].items()}
        return lambda s, r, d: table.get((s, r), 0)
    raise ValueError(f"bad acceptance spec {spec!r}")


def scheduler_config(knobs: Knobs, p: Plan) -> SchedulerConfig:
    """The scheduler's configuration of one rank serving under ``knobs`` and their plan."""
    return SchedulerConfig(
        max_num_seqs=knobs.max_num_seqs, max_num_batched_tokens=p.max_num_batched_tokens,
        max_model_len=knobs.max_model_len, num_speculative_tokens=knobs.num_speculative_tokens,
        enable_prefix_caching=knobs.enable_prefix_caching, block_size=BLOCK_SIZE,
        vllm_version=knobs.vllm_version)
