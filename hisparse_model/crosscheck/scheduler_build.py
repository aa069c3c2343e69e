"""Build vLLM's real V1 ``Scheduler`` / ``AsyncScheduler`` on CPU with the HiSparse connector.

``build_scheduler(cfg)``: a real ``VllmConfig`` on CPU (HiSparse and the
HiSparseConnector attached after construction), stand-in model and MTP
speculative configs, and the KV cache config from the real planner over
stand-in layer specs of the tiny DeepSeek-V3.2, as ``scheduler_driver``'s
docstring describes.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import dataclasses
import inspect

from hisparse_model.crosscheck.standins import cuda_hisparse_backend

BLOCK_SIZE = 64
HOST_POOL_GIB = 1
# The fix PR's tiny DeepSeek-V3.2 with vLLM's default KV cache (bf16 rows on an H200); a
# case's "model" gives another config's keys (the layout cross-check, test_layout_crosscheck)
TINY_MODEL = {"layers": 8, "mtp_layers": 1, "index_topk": 128, "kv_lora_rank": 512,
              "qk_rope_head_dim": 64, "index_head_dim": 128, "kv_cache_dtype": "auto"}


def _stand_ins(cfg: dict):
    from types import SimpleNamespace

    from vllm.config.speculative import SpeculativeConfig

    geo = {**TINY_MODEL, **cfg.get("model", {})}

    model = SimpleNamespace(
        uses_mrope=False, max_model_len=cfg["max_model_len"], is_encoder_decoder=False,
        is_diffusion=False, supports_multimodal_inputs=False, return_sampling_mask=False,
        runner_type="generate", skip_tokenizer_init=True, multimodal_config=None,
        is_multimodal_model=False, is_moe=True, pooler_config=None,
        original_max_model_len=cfg["max_model_len"], supports_kv_cache_grouping=False,
        hf_config=SimpleNamespace(index_topk=geo["index_topk"],
                                  num_nextn_predict_layers=geo["mtp_layers"]),
        hf_text_config=SimpleNamespace(index_topk=geo["index_topk"]),
    )
    spec = None
    k = cfg["num_speculative_tokens"]
    if k:
        attrs = {}
        for f in dataclasses.fields(SpeculativeConfig):  # the field defaults
            default = f.default
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            default = getattr(default, "default", default)  # pydantic FieldInfo
            attrs[f.name] = None if default is dataclasses.MISSING else default
        attrs.update({
            "method": "mtp", "num_speculative_tokens": k, "parallel_drafting": False,
            "num_speculative_tokens_per_batch_size": None,
            "draft_model_config": SimpleNamespace(hf_config=model.hf_config),
        })
        for name, fn in vars(SpeculativeConfig).items():  # the real predicates
            if not name.startswith("_") and (inspect.isfunction(fn)
                                             or isinstance(fn, property)):
                attrs[name] = fn
        spec = type("SpeculativeConfigStandIn", (), attrs)()
    return model, spec


def _layer_specs(geo: dict, num_layers: int):
    """Every layer's two specs as DeepSeek-V3.2's layers make them: the indexer's key cache
    (vllm/model_executor/models/deepseek_v2.py:657-665 `cache_role=SparseCacheRole.INDEXER`, its
    width at vllm/model_executor/models/deepseek_v2.py:730-732 `head_dim=self.head_dim + self.head_dim // self.quant_block_size * 4`)
    and the sparse MLA layer's (vllm/model_executor/layers/attention/mla_attention.py:1346-1374
    `is_index_group_leader=self.indexer is not None`): a bf16 row of kv_lora_rank +
    qk_rope_head_dim values, or fp8_ds_mla's 656-byte blob; 0.34.0's specs also carry the
    top-k buffer's width, index_topk (vllm/model_executor/models/deepseek_v2.py:1440-1444@0.34.0
    `topk_tokens = config.index_topk`)."""
    import dataclasses

    import torch
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SparseCacheRole

    index = geo["index_head_dim"]
    row = geo["kv_lora_rank"] + geo["qk_rope_head_dim"]
    quantized = geo["kv_cache_dtype"] in ("fp8", "fp8_ds_mla")
    extra = {"topk_buffer_width": geo["index_topk"]} if "topk_buffer_width" in {
        f.name for f in dataclasses.fields(MLAAttentionSpec)} else {}
    attn = ({"dtype": torch.uint8, "cache_dtype_str": "fp8_ds_mla", "state_content_bytes": 656}
            if quantized else {"dtype": torch.bfloat16, "cache_dtype_str": "auto"})
    specs = {}
    for i in range(num_layers):
        specs[f"model.layers.{i}.self_attn.indexer.k_cache"] = MLAAttentionSpec(
            block_size=BLOCK_SIZE, num_kv_heads=1, max_tp_shards=1,
            head_size=index + index // 128 * 4, dtype=torch.uint8,
            cache_role=SparseCacheRole.INDEXER)
        specs[f"model.layers.{i}.self_attn.attn"] = MLAAttentionSpec(
            block_size=BLOCK_SIZE, num_kv_heads=1, max_tp_shards=1, head_size=row,
            is_index_group_leader=True, **attn, **extra)
    return specs


def plan_kv_cache(cfg: dict):
    """(VllmConfig, worker KV-cache config, scheduler KV-cache config) from vLLM's planner.

    Raises vLLM's own ``ValueError`` where the pool (``num_gpu_blocks``, vLLM's
    ``num_gpu_blocks_override``) cannot hold one ``max_model_len`` request.
    """
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        HiSparseConfig,
        KVTransferConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs

    vcfg = VllmConfig(
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=SchedulerConfig(
            max_num_seqs=cfg["max_num_seqs"],
            max_num_batched_tokens=cfg["max_num_batched_tokens"],
            max_model_len=cfg["max_model_len"], enable_chunked_prefill=True,
            is_encoder_decoder=False, async_scheduling=cfg["async_scheduling"]),
        cache_config=CacheConfig(block_size=BLOCK_SIZE,
                                 enable_prefix_caching=cfg["enable_prefix_caching"]),
    )
    vcfg.model_config, vcfg.speculative_config = _stand_ins(cfg)
    pool = cfg.get("host_pool_gib", HOST_POOL_GIB)  # None: HiSparse without its connector
    vcfg.kv_transfer_config = None if pool is None else KVTransferConfig(
        kv_connector="HiSparseConnector", kv_role="kv_both",
        kv_connector_extra_config={"host_pool_gib": pool})
    vcfg.attention_config.hisparse_config = HiSparseConfig()
    vcfg.cache_config.kv_cache_layout = "BLHNC"  # HiSparseConnector's required layout
    vcfg.cache_config.num_gpu_blocks_override = cfg["num_gpu_blocks"]
    register_all_kvcache_specs(vcfg)
    geo = {**TINY_MODEL, **cfg.get("model", {})}
    tp = cfg.get("tensor_parallel_size", 1)
    if tp > 1:  # the ranks of one host under the default multiprocessing executor
        vcfg.parallel_config.tensor_parallel_size = tp
        vcfg.parallel_config.world_size = tp
        vcfg.parallel_config.distributed_executor_backend = "mp"
    specs = _layer_specs(geo, geo["layers"] + (geo["mtp_layers"] if cfg["num_speculative_tokens"]
                                               else 0))
    # 0.33.0 moved the planner: vllm/v1/engine/core.py:292-322@0.33.0 `get_kv_cache_configs(`
    try:
        from vllm.v1.core import kv_cache_planning as kcp
    except ImportError:
        kv_configs = kcu.get_kv_cache_configs(vcfg, [specs], [1 << 40])
    else:
        groups = kcp.get_global_kv_cache_groups(vcfg, [specs])
        vcfg.adjust_dcp_kv_cache_interleave_size(groups)
        with cuda_hisparse_backend():  # 0.34.0: the planner asks the platform's backend
            kv_configs = kcp.get_kv_cache_configs(vcfg, [specs], [1 << 40], groups)
    kv = kcu.generate_scheduler_kv_cache_config(kv_configs)
    vcfg.cache_config.num_gpu_blocks = kv.num_blocks
    return vcfg, kv_configs[0], kv


def build_scheduler(cfg: dict):
    """The real (Async)Scheduler for ``cfg`` with the HiSparse connector attached."""
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.utils.hashing import get_hash_fn_by_name

    vcfg, _, kv = plan_kv_cache(cfg)
    block_size, hash_block_size = kcu.resolve_kv_cache_block_sizes(kv, vcfg)
    cls = AsyncScheduler if cfg["async_scheduling"] else Scheduler
    sched = cls(vllm_config=vcfg, kv_cache_config=kv,
                structured_output_manager=StructuredOutputManager(vcfg),
                block_size=block_size, hash_block_size=hash_block_size)
    hash_fn = get_hash_fn_by_name(vcfg.cache_config.prefix_caching_hash_algo)
    kcu.init_none_hash(hash_fn)  # vllm/v1/engine/core.py:225-233 `init_none_hash(caching_hash_fn)`
    hasher = kcu.get_request_block_hasher(hash_block_size, hash_fn)
    return sched, hasher
