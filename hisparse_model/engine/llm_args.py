"""Engine arguments of the fix PR's reproduction, built from :class:`~hisparse_model.model.knobs.Knobs`.

The tiny DeepSeek-V3.2 is the public config.json (``hisparse_model/data/
dsv32-config.json``) shrunk by the PR's ``hf_overrides``.  The overrides are
passed as a *callable* (:func:`shrink_hf_config`): vLLM applies dict overrides
to the target model only, while a callable one is composed into the MTP
drafter's config too (``config/speculative.py:1078-1101`` in 0.31.0), so the
drafter is shrunk the same way instead of failing with a 7168-vs-256 shape error.
"""

from __future__ import annotations

import json
import os
from importlib import resources

from ..model.knobs import DEFAULT_ATTENTION_BACKEND, Knobs

from ..model.reproduction import (  # noqa: F401 - re-exported for the engine child
    BLOCK_SIZE,
    GPU_MEMORY_UTILIZATION,
    MAX_TOKENS,
    TINY_OVERRIDES,
    prompt_token_ids,
)

# "narrow": warm the ll_bf16 router GEMM for M = 1 only (read by the child and its TP workers)
LL_BF16_ENV = "HISPARSE_LL_BF16_WARMUP"


def shrink_hf_config(hf_config):
    """Apply the PR's overrides to a HF config (module level, so it pickles by reference)."""
    hf_config.update(dict(TINY_OVERRIDES))
    return hf_config


def model_config_text() -> str:
    return resources.files("hisparse_model.data").joinpath("dsv32-config.json").read_text()


def write_model_dir(path: str) -> str:
    """Write the shipped config.json into ``path`` (dummy weights need nothing else)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        f.write(model_config_text())
    return path


def llm_kwargs(knobs: Knobs, model_dir: str) -> dict:
    """Plain-data description of the ``LLM(...)`` call (what a recording stores)."""
    kw: dict = {
        "model": model_dir,
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "hf_overrides": "hisparse_model.engine.llm_args:shrink_hf_config",
        "max_model_len": knobs.max_model_len,
        "block_size": BLOCK_SIZE,
        "max_num_seqs": knobs.max_num_seqs,
        "enable_prefix_caching": knobs.enable_prefix_caching,
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
        "kv_transfer_config": {
            "kv_connector": "HiSparseConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"host_pool_gib": knobs.host_pool_gib},
        },
        "attention_config": {"hisparse_config": {}},
    }
    if knobs.attention_backend != DEFAULT_ATTENTION_BACKEND:
        # The PR's reproduction lets vLLM pick (FLASH_ATTN_MLA_SPARSE on the H200).
        kw["attention_config"]["backend"] = knobs.attention_backend
    if knobs.max_num_batched_tokens is not None:
        kw["max_num_batched_tokens"] = knobs.max_num_batched_tokens
    if knobs.num_gpu_blocks_override is not None:
        kw["num_gpu_blocks_override"] = knobs.num_gpu_blocks_override
    if knobs.num_speculative_tokens:
        kw["speculative_config"] = {
            "method": knobs.spec_method,
            "num_speculative_tokens": knobs.num_speculative_tokens,
            "parallel_drafting": knobs.parallel_drafting,
        }
    if knobs.enforce_eager:
        kw["enforce_eager"] = True
    if knobs.cudagraph_mode is not None:
        kw["compilation_config"] = {"cudagraph_mode": knobs.cudagraph_mode}
    return kw


def engine_kwargs(kw: dict) -> dict:
    """:func:`llm_kwargs`' plain data as vLLM's engine arguments take them: the shrinking
    callable, the KV-transfer and attention configs as vLLM's own objects (imports vllm)."""
    from vllm.config import AttentionConfig, HiSparseConfig, KVTransferConfig

    kw = json.loads(json.dumps(kw))
    kw["hf_overrides"] = shrink_hf_config
    kw["kv_transfer_config"] = KVTransferConfig(**kw["kv_transfer_config"])
    att = kw.pop("attention_config")
    kw["attention_config"] = AttentionConfig(
        hisparse_config=HiSparseConfig(**att.pop("hisparse_config")), **att
    )
    return kw


def build_llm(kw: dict):
    """Turn :func:`llm_kwargs` into a live ``vllm.LLM`` (imports vllm here only)."""
    from vllm import LLM

    kw = engine_kwargs(kw)
    return LLM(**kw)
