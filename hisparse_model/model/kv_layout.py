"""How vLLM lays a HiSparse model's KV cache out: row sizes, groups, the host block's stride.

Read from the served model's config (``served_model.py``), the KV-cache dtype and the
parallel layout; ``host_pool.py`` and ``kv_pool.py`` count blocks with it.

* **Rows.**  A sparse-MLA layer stores one row a token: with ``fp8_ds_mla`` an opaque
  656-byte blob (vllm/model_executor/layers/attention/mla_attention.py:1353-1361
  `state_content_bytes={"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}.get(`), else
  ``kv_lora_rank + qk_rope_head_dim`` values of the model's dtype (bf16 for DeepSeek-V3.2:
  576 values, 1,152 bytes).  A quantized dtype is served by FLASHMLA_SPARSE in the
  ``fp8_ds_mla`` format (vllm/model_executor/layers/attention/mla_attention.py:357-368
  `return "fp8_ds_mla"`); FLASH_ATTN_MLA_SPARSE takes auto, float16 and bfloat16 only
  (vllm/v1/attention/backends/mla/flashattn_mla_sparse.py:36-40 `"bfloat16",`).  The
  indexer's key is ``index_head_dim`` fp8 bytes plus a 4-byte scale per 128
  (vllm/model_executor/models/deepseek_v2.py:730-732 `head_dim=self.head_dim + self.head_dim // self.quant_block_size * 4`).
* **Groups** (vllm/v1/hisparse/layout.py:124 `def _lay_out_hisparse_groups`): the host
  source group (every sparse layer), the indexer group (every layer's indexer), and hot
  groups packing whole index groups (every DeepSeek-V3.2 layer leads its own, having its
  own indexer: vllm/model_executor/layers/attention/mla_attention.py:1372
  `is_index_group_leader=self.indexer is not None`) while their pages together fit the
  indexer group's page (vllm/v1/hisparse/layout.py:199-206
  `if current and current_page + unit_page > indexer_page:`), each hot group with a
  resident group beside it (vllm/v1/hisparse/layout.py:172-184 `resident_groups.append(`).
  The fix PR's 8 tiny layers: one layer a group (a 73,728-byte page is more than the
  indexer's 67,584); DeepSeek-V3.2's 61 in bf16: 6 a group, 11 groups.
* **Hot buffer**: ``(q + 1) * index_topk`` rows a request (vllm/v1/hisparse/runtime.py:122
  `device_buffer_size = (max_query_len + 1) * model_top_k`), refused above the int16
  slot index's 32,768 (vllm/v1/hisparse/runtime.py:137-143
  `HiSparse device_buffer_size exceeds the int16 slot-index`) when the attention layers
  are built (vllm/v1/hisparse/runtime.py:1287 `config = ResolvedHiSparseConfig.from_vllm_config(vllm_config, model_top_k)`).
* **Host block**: the source group's page, the sum of its layers' pages
  (vllm/v1/kv_cache_interface.py:1262-1263 `return sum(spec.page_size_bytes for spec in self.kv_cache_specs.values())`),
  rounded up to the OS page (4,096 bytes) when tensor-parallel ranks share one pool
  (vllm/v1/hisparse/runtime.py:254-274 `round_up(page_size_bytes, SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT)`,
  vllm/v1/kv_offload/cpu/shared_offload_region.py:87 `BLOCK_SIZE_ALIGNMENT: int = mmap.PAGESIZE`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .reproduction import BLOCK_SIZE
from .served_model import ServedModel, served_model

DS_MLA_ROW_BYTES = 656  # fp8_ds_mla: 512 quantized NoPE + 16 scale + 128 RoPE bytes
MODEL_DTYPE_BYTES = 2  # DeepSeek-V3.2's bf16 ("auto", "bfloat16"; float16 the same size)
QUANTIZED = ("fp8", "fp8_ds_mla")  # served as fp8_ds_mla
KV_CACHE_DTYPES = ("auto", "bfloat16", *QUANTIZED)
INDEXER_QUANT_BLOCK = 128  # values per 4-byte scale of the indexer's fp8 key
HOT_SLOT_LIMIT = 32_768  # torch.iinfo(torch.int16).max + 1
OS_PAGE = 4_096  # mmap.PAGESIZE on x86-64 Linux


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Layout:
    """The KV-cache layout of one knob set, as vLLM's planner builds it."""

    model: ServedModel
    k: int  # MTP draft tokens
    cache_format: str  # "bf16" or "fp8_ds_mla"
    shared_host_pool: bool  # tensor-parallel ranks share one host pool

    @property
    def attention_layers(self) -> int:
        """Sparse-MLA layers with KV: the target's, and the MTP drafter's under speculation."""
        m = self.model
        return m.num_hidden_layers + (m.num_nextn_predict_layers if self.k else 0)

    @property
    def row_bytes(self) -> int:
        """Bytes of one token's row in one sparse-MLA layer."""
        if self.cache_format == "fp8_ds_mla":
            return DS_MLA_ROW_BYTES
        return (self.model.kv_lora_rank + self.model.qk_rope_head_dim) * MODEL_DTYPE_BYTES

    @property
    def page_bytes(self) -> int:
        """A 64-token page of one layer's rows (a hot or resident group's page)."""
        return BLOCK_SIZE * self.row_bytes

    @property
    def indexer_page_bytes(self) -> int:
        """The indexer group's page: every layer's 64 keys of index_head_dim fp8 + scales."""
        d = self.model.index_head_dim
        return self.attention_layers * BLOCK_SIZE * (d + d // INDEXER_QUANT_BLOCK * 4)

    @property
    def layers_per_hot_group(self) -> int:
        """Layers packed into one hot group: as many pages as fit the indexer's, at least one."""
        return max(1, self.indexer_page_bytes // self.page_bytes)

    @property
    def hot_groups(self) -> int:
        """Hot groups (and as many resident groups)."""
        return _cdiv(self.attention_layers, self.layers_per_hot_group)

    @property
    def worker_groups(self) -> int:
        """KV-cache groups of the worker: host source, indexer, the resident and hot groups."""
        return 2 + 2 * self.hot_groups

    @property
    def device_buffer_size(self) -> int:
        """Hot rows a request holds: (q + 1) * index_topk."""
        return (2 + self.k) * self.model.index_topk

    @property
    def hot_blocks(self) -> int:
        """Blocks of one hot group per request, fixed whatever its length."""
        return _cdiv(self.device_buffer_size, BLOCK_SIZE)

    @property
    def source_page_bytes(self) -> int:
        """The host source group's page: every sparse layer's 64-token page."""
        return self.attention_layers * self.page_bytes

    @property
    def host_block_bytes(self) -> int:
        """The host pool's stride: the source page, OS-page aligned for a shared pool."""
        page = self.source_page_bytes
        return _cdiv(page, OS_PAGE) * OS_PAGE if self.shared_host_pool else page

    def describe(self) -> str:
        """What a printed count was computed for."""
        fmt = "fp8_ds_mla rows of 656 bytes" if self.cache_format == "fp8_ds_mla" else \
            f"bf16 rows of {self.row_bytes:,} bytes"
        mtp = f" + {self.model.num_nextn_predict_layers} MTP" if self.k else ""
        shared = (f"; a page of {self.source_page_bytes:,} bytes rounded up to 4,096-byte OS "
                  "pages: the tensor-parallel ranks share one pool"
                  if self.host_block_bytes != self.source_page_bytes else "")
        return (f"{self.model.label}: {self.model.num_hidden_layers}{mtp} layers, "
                f"index_topk {self.model.index_topk}, {fmt}{shared}")


def cache_format(kv_cache_dtype: str) -> str:
    """The row format a KV-cache dtype gives: quantized ones are served as fp8_ds_mla."""
    return "fp8_ds_mla" if kv_cache_dtype in QUANTIZED else "bf16"


def buffer_refusal(knobs) -> str | None:
    """vLLM's refusal of a hot buffer past the int16 slot index, or None."""
    lay = layout(knobs)
    size = lay.device_buffer_size
    if size <= HOT_SLOT_LIMIT:
        return None
    topk = lay.model.index_topk
    most = HOT_SLOT_LIMIT // topk - 2
    said = (f"HiSparse device_buffer_size exceeds the int16 slot-index limit: got {size}, "
            f"maximum is {HOT_SLOT_LIMIT}. ((K + 2) x index_topk {topk} rows a request, K = "
            f"{lay.k}; vLLM refuses it as it builds the attention layers: ")
    if lay.k and most >= 0:
        return f"num_speculative_tokens: {said}use at most {most} speculative tokens)"
    return (f"model: {said}the model's index_topk {topk} is more than {HOT_SLOT_LIMIT // (2 + lay.k)} "
            f"({lay.model.label}))")


@functools.lru_cache(maxsize=1 << 12)
def layout_for(model: str, overrides: str | None, k: int, dtype: str, shared: bool) -> Layout:
    return Layout(served_model(model, overrides), k, cache_format(dtype), shared)


def layout(knobs) -> Layout:
    """The layout of a knob set (a shared host pool under TP > 1, as vLLM's default
    multiprocessing executor on one host runs it)."""
    return layout_for(knobs.model, knobs.hf_overrides, knobs.num_speculative_tokens,
                   knobs.kv_cache_dtype, knobs.tensor_parallel_size > 1)
